// Explicit instantiation declarations of the CPU kernel drivers, float and double: a translation
// unit that sees this header compiles none of their SIMD twins (base, AVX2, AVX-512, each head
// size); they come from llmc/cpu/kernel_instances.cpp, compiled once and linked in. For builds of
// many translation units (the Catch2 suite, the ASan, emulated and nvcc builds: `-include` in the
// Makefile), where every unit compiled the twins again (~60-90% of a unit's compile time under
// ASan + UBSan, ~30% at -O3). The CPU programs (`make cpu`, one unit each) do not use it. Same
// sources, same flags: the code is the same as when each unit instantiated it.
#pragma once
#include "llmc/cpu/attention_flash.h"
#include "llmc/cpu/kv_cache.h"
#include "llmc/cpu/matmul.h"
#include "llmc/cpu/simd.h"

namespace llmc {
namespace cpu {
namespace flash {
extern template void forward<float>(float*, float*, const float*, const Shape<float>&, TaskStats*, Isa);
extern template void forward<double>(double*, double*, const double*, const Shape<double>&, TaskStats*, Isa);
extern template void backward<float>(float*, const float*, const float*, const float*, const float*,
                                     const Shape<float>&, Isa);
extern template void backward<double>(double*, const double*, const double*, const double*, const double*,
                                      const Shape<double>&, Isa);
}  // namespace flash
extern template void attention_decode<float>(float*, const float*, const KvCache<float>&, int, int, float, Isa);
extern template void attention_decode<double>(double*, const double*, const KvCache<double>&, int, int, float, Isa);
extern template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int, int);
extern template void matmul_forward<double>(double*, const double*, const double*, const double*, int, int, int);
extern template void matmul_backward<float>(float*, float*, float*, const float*, const float*, const float*, int, int,
                                            int);
extern template void matmul_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                             int, int, int);
}  // namespace cpu
}  // namespace llmc
