// The memory-read ceiling the matrix-vector kernels are measured against: a read of a buffer at
// the widest vector width the CPU has (runtime dispatch), several independent accumulators, no
// stores. A scalar word loop under-reads modern memory systems (it retires too few loads per
// cycle), which would flatter every kernel compared with it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qf::kernels {

// Reads bytes [p, p + n) once and returns a value that depends on every byte (so the read cannot
// be elided). p needs no alignment.
uint64_t read_all(const void* p, size_t n);

}  // namespace qf::kernels
