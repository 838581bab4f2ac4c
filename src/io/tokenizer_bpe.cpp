// BPE merge loop: a heap of candidate pairs over a linked list of symbols, plus a word cache.
#include "io/tokenizer_bpe.h"

#include "core/error.h"
#include "io/io_util.h"
#include "io/tokenizer_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <queue>

namespace qf::tok {
namespace {

// Words longer than this are rare (whole texts for tokenizers without a pre-tokenizer) and
// not worth keeping; the cap on entries bounds memory on adversarial input.
constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kMaxCacheEntries = 200'000;
// From this many symbols on, rank buckets beat a heap (whose entries no longer fit in cache).
constexpr size_t kLongWordSymbols = 2048;

// The linked list of symbols the merge loops work on; merged-away symbols are marked dead.
struct SymbolList {
  std::vector<int32_t> prev, next;
  std::vector<uint8_t> alive;
  explicit SymbolList(size_t n) : prev(n), next(n), alive(n, 1) {
    for (size_t i = 0; i < n; ++i) {
      prev[i] = int32_t(i) - 1;
      next[i] = i + 1 < n ? int32_t(i + 1) : -1;
    }
  }
  // Merges the symbol at `pos` with its right neighbour.
  void merge_right(size_t pos) {
    const auto right = size_t(next[pos]);
    alive[right] = 0;
    next[pos] = next[right];
    if (next[pos] >= 0) prev[size_t(next[pos])] = int32_t(pos);
  }
  void compact(std::vector<int32_t>& symbols) const {
    size_t w = 0;
    for (size_t i = 0; i < symbols.size(); ++i)
      if (alive[i]) symbols[w++] = symbols[i];
    symbols.resize(w);
  }
};

}  // namespace

void BpeModel::PairTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  size_ = 0;
}

void BpeModel::PairTable::insert_or_assign(int32_t a, int32_t b, Merge m) {
  const uint64_t key = pair_key(a, b);
  for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) {
      s.merge = m;
      return;
    }
    if (s.key == kEmpty) {
      s = Slot{key, m};
      ++size_;
      return;
    }
  }
}

BpeModel::BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options, const std::string& context)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  const std::string& prefix = options_.continuing_subword_prefix;
  merges_.reserve(merges.size());
  merge_count_ = merges.size();
  std::vector<std::pair<int32_t, int32_t>> sides;
  std::vector<int32_t> results;
  sides.reserve(merges.size());
  results.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const int32_t ia = id(a), ib = id(b);
    if (ia < 0 || ib < 0)
      fail("{}: merge {} ({} {}) names a token that is not in the vocabulary", context, rank,
           quote_name(a), quote_name(b));
    // The right side carries the continuing-subword prefix, which the merged token has once.
    const std::string_view b_tail =
        !prefix.empty() && b.starts_with(prefix) ? std::string_view(b).substr(prefix.size()) : b;
    std::string merged = a;
    merged.append(b_tail);
    const int32_t result = id(merged);
    if (result < 0)
      fail("{}: merge {} ({} {}) makes {}, which is not in the vocabulary", context, rank,
           quote_name(a), quote_name(b), quote_name(merged));
    // A repeated pair keeps its last rank, as in Hugging Face tokenizers.
    merges_.insert_or_assign(ia, ib, Merge{int32_t(rank), result});
    sides.emplace_back(ia, ib);
    results.push_back(result);
  }
  // The highest rank of a merge that makes each token; a merge that uses a token made at
  // its own rank or later breaks the monotone order merge_by_rank relies on.
  int32_t max_id = 0;
  for (const auto& [token, token_id] : vocab_) max_id = std::max(max_id, token_id);
  std::vector<int32_t> made_at(size_t(max_id) + 1, -1);
  for (size_t rank = 0; rank < results.size(); ++rank)
    made_at[size_t(results[rank])] = int32_t(rank);
  for (size_t rank = 0; rank < sides.size() && monotone_; ++rank) {
    const Merge* m = find_merge(sides[rank].first, sides[rank].second);
    monotone_ = m->rank != int32_t(rank) ||  // superseded by a later duplicate
                (made_at[size_t(sides[rank].first)] < int32_t(rank) &&
                 made_at[size_t(sides[rank].second)] < int32_t(rank));
  }
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(ch, byte_to_unicode(uint8_t(b)));
    byte_ids_[b] = id(ch);
    fallback_ids_[b] = id(fmt::format("<0x{:02X}>", b));
  }
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const {
  const BpeOptions& o = options_;
  if (o.byte_level && o.continuing_subword_prefix.empty() && o.end_of_word_suffix.empty()) {
    for (const char c : word) {
      const int32_t t = byte_ids_[static_cast<unsigned char>(c)];
      if (t >= 0) symbols.push_back(t);
    }
    return;
  }
  // One symbol per character (per byte-level character when byte_level), as HF's merge_word.
  std::string mapped;
  if (o.byte_level) {
    for (const char c : word) append_utf8(mapped, byte_to_unicode(static_cast<unsigned char>(c)));
    word = mapped;
  }
  bool pending_unk = false;
  std::string key;
  for (size_t i = 0; i < word.size();) {
    const size_t n = utf8_length(static_cast<unsigned char>(word[i]));
    const std::string_view ch = word.substr(i, n);
    key.clear();
    if (i > 0) key += o.continuing_subword_prefix;
    key += ch;
    if (i + n == word.size()) key += o.end_of_word_suffix;
    i += n;
    int32_t t = id(key);
    if (t >= 0) {
      symbols.push_back(t);
      pending_unk = false;
      continue;
    }
    if (o.byte_fallback) {
      bool all = true;
      for (const char c : key) all = all && fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (const char c : key) symbols.push_back(fallback_ids_[static_cast<unsigned char>(c)]);
        pending_unk = false;
        continue;
      }
    }
    if (o.unk_id < 0) continue;
    if (!(o.fuse_unk && pending_unk)) symbols.push_back(o.unk_id);
    pending_unk = true;
  }
}

void BpeModel::merge_with_heap(std::vector<int32_t>& symbols) const {
  const size_t n = symbols.size();
  SymbolList list(n);
  struct Candidate {
    int32_t rank, pos, result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t left) {
    const int32_t right = list.next[size_t(left)];
    if (right < 0) return;
    if (const Merge* m = find_merge(symbols[size_t(left)], symbols[size_t(right)]))
      heap.push({m->rank, left, m->result});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const auto pos = size_t(top.pos);
    // Entries go stale when a neighbour merged since they were pushed.
    if (!list.alive[pos] || list.next[pos] < 0) continue;
    const Merge* m = find_merge(symbols[pos], symbols[size_t(list.next[pos])]);
    if (!m || m->result != top.result) continue;
    symbols[pos] = top.result;
    list.merge_right(pos);
    if (list.prev[pos] >= 0) push(list.prev[pos]);
    push(top.pos);
  }
  list.compact(symbols);
}

void BpeModel::merge_by_rank(std::vector<int32_t>& symbols) const {
  const size_t n = symbols.size();
  SymbolList list(n);
  std::vector<std::vector<int32_t>> buckets(merge_count_);
  auto push = [&](int32_t left) {
    const int32_t right = list.next[size_t(left)];
    if (right < 0) return;
    if (const Merge* m = find_merge(symbols[size_t(left)], symbols[size_t(right)]))
      buckets[size_t(m->rank)].push_back(left);
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  for (size_t rank = 0; rank < buckets.size(); ++rank) {
    std::vector<int32_t>& bucket = buckets[rank];
    if (bucket.empty()) continue;
    // Leftmost first among equal ranks; merges of this rank only push higher ranks.
    std::sort(bucket.begin(), bucket.end());
    for (const int32_t p : bucket) {
      const auto pos = size_t(p);
      if (!list.alive[pos] || list.next[pos] < 0) continue;
      const Merge* m = find_merge(symbols[pos], symbols[size_t(list.next[pos])]);
      if (!m || m->rank != int32_t(rank)) continue;
      symbols[pos] = m->result;
      list.merge_right(pos);
      if (list.prev[pos] >= 0) push(list.prev[pos]);
      push(p);
    }
    std::vector<int32_t>().swap(bucket);
  }
  list.compact(symbols);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    const std::string whole = options_.byte_level ? [&] {
      std::string s;
      for (const char c : word) append_utf8(s, byte_to_unicode(static_cast<unsigned char>(c)));
      return s;
    }() : std::string(word);
    if (const int32_t t = id(whole); t >= 0) {
      out.push_back(t);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mutex_);
    if (const auto it = cache_.find(word); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  initial_symbols(word, symbols);
  if (symbols.size() >= kLongWordSymbols && monotone_)
    merge_by_rank(symbols);
  else if (symbols.size() >= 2)
    merge_with_heap(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::unique_lock lock(cache_mutex_);
    if (cache_.size() < kMaxCacheEntries) cache_.emplace(std::string(word), std::move(symbols));
  }
}

}  // namespace qf::tok
