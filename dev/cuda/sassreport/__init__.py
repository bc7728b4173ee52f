"""The pieces of dev/cuda/sass_report (static SASS metrics of the sm_90 kernels): tools (finding
cuobjdump, nvdisasm, c++filt, nvcc), sass_parse (cuobjdump -sass text -> instructions), cfg (basic
blocks, loops, the hot loops' instruction mix), resources (-res-usage and the ELF's launch bounds),
launches (block size and dynamic shared memory as the launchers set them), occupancy (H100
theoretical occupancy, cross-checked with the toolkit's cuda_occupancy.h), report (table, JSON)."""
