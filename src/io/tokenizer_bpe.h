// The BPE model of the tokenizers (private to src/io/tokenizer*.cpp): vocabulary, ranked
// merges, and the merge loop that turns one pre-tokenized word into ids.
#pragma once

#include <cstdint>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace qf::tok {

struct BpeOptions {
  // Words arrive as raw bytes and each byte starts as the token of its GPT-2 alphabet
  // character (vocabulary strings are in that alphabet).
  bool byte_level = false;
  // A character missing from the vocabulary becomes its <0xXX> byte tokens when all exist.
  bool byte_fallback = false;
  int32_t unk_id = -1;    // for characters still missing; -1 drops them (as HF does)
  bool fuse_unk = false;  // consecutive unknown characters make one unk token
  bool ignore_merges = false;  // a word found whole in the vocabulary is one token
  std::string continuing_subword_prefix, end_of_word_suffix;
};

// Hash of strings usable with string_view look-ups (no temporary std::string per look-up).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `merges` in rank order (first merges first). Throws qf::Error "<context>: ..." when a
  // merge names a token missing from the vocabulary, or its result is missing.
  BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options, const std::string& context);

  // Appends the ids of one pre-tokenized word (UTF-8 text, or raw bytes if byte_level).
  // Equal pairs merge lowest rank first, leftmost first among equal ranks (Hugging Face's
  // order), in O(n log n); results of short words are cached.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  const Vocab& vocab() const { return vocab_; }
  int32_t id(std::string_view token) const {
    const auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  }
  const BpeOptions& options() const { return options_; }

 private:
  struct Merge {
    int32_t rank, result;
  };
  // Open-addressing table of token pairs: the merge loop's hot look-up.
  class PairTable {
   public:
    void reserve(size_t n);
    void insert_or_assign(int32_t a, int32_t b, Merge m);
    const Merge* find(int32_t a, int32_t b) const {
      const uint64_t key = pair_key(a, b);
      for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
        const Slot& s = slots_[i];
        if (s.key == key) return &s.merge;
        if (s.key == kEmpty) return nullptr;
      }
    }

   private:
    static constexpr uint64_t kEmpty = ~uint64_t(0);  // ids are non-negative
    struct Slot {
      uint64_t key = kEmpty;
      Merge merge{};
    };
    static uint64_t pair_key(int32_t a, int32_t b) {
      return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
    }
    size_t slot_of(uint64_t key) const {
      return size_t((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
    }
    std::vector<Slot> slots_{Slot{}};
    size_t mask_ = 0, size_ = 0;
  };

  const Merge* find_merge(int32_t a, int32_t b) const { return merges_.find(a, b); }
  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const;
  // Hugging Face's order with a heap of candidate pairs: for words of a few symbols.
  void merge_with_heap(std::vector<int32_t>& symbols) const;
  // The same result with one bucket per rank (sequential memory, no big heap): for long
  // words, when every merge only uses tokens made by lower-ranked merges (`monotone_`), so
  // a merge never creates a pair of its own or a lower rank.
  void merge_by_rank(std::vector<int32_t>& symbols) const;

  Vocab vocab_;
  PairTable merges_;
  size_t merge_count_ = 0;
  bool monotone_ = true;
  BpeOptions options_;
  int32_t byte_ids_[256];     // byte_level: the token of each byte, -1 if missing
  int32_t fallback_ids_[256];  // byte_fallback: the <0xXX> tokens, -1 if missing

  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>>
      cache_;
};

}  // namespace qf::tok
