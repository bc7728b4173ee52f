// The definitions behind llmc/cpu/kernel_instances.h: each CPU kernel driver instantiated once,
// float and double, for the builds that link this object instead of instantiating them per unit.
#include "llmc/cpu/kernel_instances.h"

namespace llmc {
namespace cpu {
namespace flash {
template void forward<float>(float*, float*, const float*, const Shape<float>&, TaskStats*, Isa);
template void forward<double>(double*, double*, const double*, const Shape<double>&, TaskStats*, Isa);
template void backward<float>(float*, const float*, const float*, const float*, const float*, const Shape<float>&, Isa);
template void backward<double>(double*, const double*, const double*, const double*, const double*,
                               const Shape<double>&, Isa);
}  // namespace flash
template void attention_decode<float>(float*, const float*, const KvCache<float>&, int, int, float, Isa);
template void attention_decode<double>(double*, const double*, const KvCache<double>&, int, int, float, Isa);
template void matmul_forward<float>(float*, const float*, const float*, const float*, int, int, int);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int, int, int);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*, const float*, int, int, int);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*, const double*, int, int,
                                      int);
}  // namespace cpu
}  // namespace llmc
