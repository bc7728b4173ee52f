# train_gpt2_ls: one place for flags. `make help` prints this list.
#   make                 the trainer, the generator, the CPU test binary and every GPU target (needs nvcc, no
#                        GPU); without nvcc on PATH: the trainer and the generator built by the host
#                        compiler (CXX) for the CPU, and the CPU test binary (one line says so)
#   make train_gpt2_ls / generate_gpt2_ls  one of the two programs (by nvcc; HOST_BUILD=1: by CXX); `make
#                        generate_gpt2_ls` alone, HOST_BUILD not given, picks its build as make train does
#   make build/test_cpu / build/dev/NAME / build/test_gpu/NAME  the Catch2 binary / a kernel lab / a GPU test
#   make cpu             the trainer and the generator built by the host compiler for the CPU only (faster to build;
#                        --device cuda then says the build has no CUDA); `make` rebuilds them with nvcc
#   make train           the main job: prepare tiny Shakespeare (GPT-2 BPE) and train on it into TRAIN_OUT;
#                        run again, it continues that run (-y 1, its recorded data and settings). It trains
#                        with the programs' current build: after `make cpu` the host build, and on a machine
#                        without a GPU (nvidia-smi lists none) the host build (one line says so; HOST_BUILD=0
#                        builds with nvcc). Each program is rebuilt only when its own compiler changes
#   make data-tinyshakespeare  only the data of make train: data/shards/tinyshakespeare_gpt2/ (data/prepare.py)
#   make test            every CPU test (Catch2 + pytest + end-to-end), compiles every GPU target, and
#                        runs the GPU kernels under device emulation (make test-emu); without nvcc only
#                        the CPU tests (the GPU targets and the emulation need the CUDA toolkit's nvcc)
#   make emu / test-emu  the emulated build of the GPU labs and tests (docs/emulation.md) / run it
#   make test-gpu        GPU tests (needs a GPU)
#   make gpu-targets / dist-matrix  compile every GPU target / the trainer without MPI and/or NCCL (build/matrix)
#   make test-asan       Catch2 + a short train/resume/generate under ASan + UBSan (build/asan; the
#                        train/generate of build/emu where nvcc is found, ASAN_E2E_DIR=build/asan for build/asan's)
#   make asan-e2e        only the short train/resume/generate of test-asan (scripts/asan_e2e.sh)
#   make test-reference  the PyTorch reference's self-tests (needs torch; TORCH_PYTHON=/usr/bin/python3)
#   make fuzz / fuzz-smoke  libFuzzer harnesses of the file readers: 10 min each / a few s each (build/fuzz)
#   make format / format-check  apply .clang-format to the C++/CUDA sources / check them (part of make test)
#   make sass-report     static SASS report of the sm_90 kernels the nvcc-built trainer and generator link:
#                        registers, spills, shared memory, H100 occupancy, hot-loop instruction mix
#                        (dev/cuda/sass_report; table on stdout, JSON in $(BUILD)/sass/report.json; part of make test)
#   make host-boundary-bench  time the host's work at a training step's boundary on this CPU (a table)
#   make deps            install the dependencies (scripts/install_deps.sh); `make deps X` then makes X
#   make clean           remove BUILD and the two programs
#   make help            this list
# Variables: CUDA_ARCH="80 90"  PRECISION=BF16|FP32  EXTRA_INCLUDE=.deps/include
#            SHARED_DATA=../shared/data  NVCC=nvcc CXX=g++ PYTHON=python3  BUILD=build
#            USE_MPI=auto|0  USE_NCCL=auto|0  MPICXX=mpicxx  CUDA_HOME=<from nvcc's path>
#            HOST_BUILD=0|1 (1: the trainer and the generator by CXX; default 1 when nvcc is not found)
#            CUBLASLT_LAZY=1|0 (nvcc's trainer and generator: load cuBLASLt on first use, or 0: link it)
#            TRAIN_ARGS="" (flags after a new run's -x 300 -v 50 -s 100 -n 100, which they override; continuing a run: these only)
#            TRAIN_OUT=out/tinyshakespeare
#            CI=true (GPU targets for sm_90 only; make test fails without nvcc)  JOBS=<nproc> (make test)
#            GPU_CHECK_EMU_PARTS=build,first,...|all (make test-emu)  EMU_SCHEDULES=greedy-forward,greedy-reverse
#            EMU_FP32_MODEL_CASES=ragged,...|"" (make test-emu: the FP32 test_cuda_model's cases; "": all)
#            EMU_BF16_MODEL_CASES=-mhsa_nobias_erf,...|"" (make test-emu: the BF16 test_cuda_model's cases)
#            FUZZ_SECONDS=600  FUZZ_SMOKE_SECONDS=3  FUZZ_NAMES="shard config"  FUZZ_ARGS=-runs=N (libFuzzer flags)

# `make deps GOALS...` (the README's commands): install first, then make GOALS in a fresh make, so
# that what the Makefile detects when it is read (MPI, NCCL; below) includes what deps installed.
# Without this, `make deps train` on a fresh machine built the trainer as if there were no MPI.
DEPS_THEN := $(filter-out deps,$(MAKECMDGOALS))
ifneq ($(filter deps,$(MAKECMDGOALS)),)
ifneq ($(DEPS_THEN),)
DEPS_FIRST := 1
deps:
	scripts/install_deps.sh
	$(MAKE) $(DEPS_THEN)
$(DEPS_THEN): deps
	@:
.PHONY: deps $(DEPS_THEN)
endif
endif

# make help: the header comment above, the one list of targets and variables
help:
	@sed -n '1,/^$$/s/^# \{0,1\}//p' $(firstword $(MAKEFILE_LIST))
.PHONY: help
# A recipe that fails or is killed (a GPU lease's time limit) leaves no half-written target that a later
# make would take as current.
.DELETE_ON_ERROR:

ifndef DEPS_FIRST
NVCC ?= nvcc
CXX ?= g++
PYTHON ?= python3
# CI (CI=true, no GPU) compiles each GPU target once, for sm_90 only, to keep the run short.
ifeq ($(CI),true)
CUDA_ARCH ?= 90
else
CUDA_ARCH ?= 80 90
endif
PRECISION ?= BF16
EXTRA_INCLUDE ?=
SHARED_DATA ?= ../shared/data
BUILD := build
comma := ,# a comma inside a function's argument: $(if C,a$(comma) b)
empty :=
space := $(empty) $(empty)# a space inside $(subst): $(subst $(space),$(comma),a b)

ifneq ($(PRECISION),BF16)
ifneq ($(PRECISION),FP32)
$(error PRECISION must be BF16 or FP32, got '$(PRECISION)')
endif
endif

# nvcc as the shell finds it (PATH, or NVCC=/path/to/nvcc). Without it, or with HOST_BUILD=1 (make cpu),
# the trainer and the generator are built by $(CXX) as C++ with the CPU backend only (llmc/app/device.h:
# no LLMC_CUDA_BACKEND), and the GPU targets and the emulated build (which needs CUDA's headers) are left
# out of `make` and `make test`; one line says so (once per top-level make).
NVCC_FOUND := $(shell command -v $(NVCC) 2>/dev/null)
# `make train` or `make generate_gpt2_ls` (the README's commands that use a program; alone, together or
# with data-tinyshakespeare) and HOST_BUILD not given: on a machine without a GPU (nvidia-smi lists
# none) they build and use the host build (CXX, CPU only; ~1 minute instead of the nvcc build's ~3),
# and where the last build of each program they build was the host build (`make cpu`: its stamp
# $(BUILD)/compiler-PROGRAM, below, holds HOST_BUILD_MARK) they keep it (rebuilt by CXX only when a
# source changed); one line says which. `make`, `make train_gpt2_ls` and the other goals build with nvcc.
HOST_BUILD_MARK := (host, CPU only)
NVIDIA_SMI ?= nvidia-smi
USE_GOALS := $(filter train generate_gpt2_ls,$(MAKECMDGOALS))
USE_PROGRAMS := $(patsubst train,train_gpt2_ls,$(USE_GOALS))
USE_HOST_STAMPS := $(foreach p,$(USE_PROGRAMS),$(if $(findstring $(HOST_BUILD_MARK),$(shell cat $(BUILD)/compiler-$(p) 2>/dev/null)),$(p)))
# the line's words: make train trains with the build, make generate_gpt2_ls builds it
USE_SAID = make $(USE_GOALS): $(1): $(if $(filter train,$(USE_GOALS)),training with the host build of \
  $(subst $(space), and ,$(USE_PROGRAMS)) (CPU only),the host build of $(USE_PROGRAMS) (CPU only)$(comma) as make train's)
# A line of these notices goes to stderr (stdout carries what the goal produces: make train's run):
# $(SAY) prints SAID, expanded where it is used.
SAY = $(shell printf '%s\n' '$(subst ','\'',$(SAID))' >&2)
ifeq ($(origin HOST_BUILD)$(filter-out train generate_gpt2_ls data-tinyshakespeare,$(MAKECMDGOALS)),undefined)
ifneq ($(NVCC_FOUND),)
ifneq ($(USE_GOALS),)
ifeq ($(shell $(NVIDIA_SMI) -L 2>/dev/null | grep -c '^GPU'),0)
HOST_BUILD := 1
SAID = $(call USE_SAID,no GPU on this machine (nvidia-smi lists none)); `make $(USE_GOALS) HOST_BUILD=0` builds it with nvcc
$(SAY)
else ifeq ($(words $(USE_HOST_STAMPS)),$(words $(USE_PROGRAMS)))
HOST_BUILD := 1
SAID = make $(USE_GOALS): $(subst $(space), and ,$(USE_PROGRAMS)) is the host build of `make cpu` (CPU only): \
  $(if $(filter train,$(USE_GOALS)),training with it,keeping it); `make $(USE_GOALS) HOST_BUILD=0` rebuilds it with nvcc
$(SAY)
endif
endif
endif
endif
HOST_BUILD ?= $(if $(NVCC_FOUND),0,1)
ifeq ($(NVCC_FOUND),)
ifndef LLMC_NO_NVCC_SAID
SAID = make: no nvcc ('$(NVCC)' is not on PATH): building train_gpt2_ls and generate_gpt2_ls with $(CXX) for the CPU; the GPU targets and the emulated GPU tests need the CUDA toolkit
$(SAY)
export LLMC_NO_NVCC_SAID := 1
endif
endif

INCLUDES := -I. $(addprefix -I,$(EXTRA_INCLUDE))
CXXFLAGS ?= -O2 -g
CXXFLAGS += -std=c++17 -Wall -Wextra -fopenmp -MMD -MP $(INCLUDES)
NVCC_GENCODE := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a))
NVCCFLAGS ?= -O3
NVCCFLAGS += -std=c++17 $(NVCC_GENCODE) -Xcompiler -fopenmp,-Wall -DENABLE_$(PRECISION) $(INCLUDES)
CUDA_LIBS := -lcublas -lcublasLt -lgomp

# Multi-process training (docs/multigpu.md), only for the trainer. MPI when `mpicxx` exists (its
# --showme flags; Open MPI's wrapper), NCCL when its header exists; each optional, so the trainer
# builds where they are missing (a multi-process run then says what is missing). Detected once
# (MPI_FLAGS/NCCL_FLAGS, empty when absent); USE_MPI/USE_NCCL=0 leave one out.
USE_MPI ?= auto
USE_NCCL ?= auto
MPICXX ?= mpicxx
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC_FOUND))
MPI_FLAGS :=
MPI_LIBS :=
MPI_LINK_FLAGS := $(shell $(MPICXX) --showme:link 2>/dev/null)
ifneq ($(strip $(MPI_LINK_FLAGS)),)
MPI_COMPILE_FLAGS := $(shell $(MPICXX) --showme:compile 2>/dev/null)
MPI_LIB_DIRS := $(patsubst -L%,%,$(filter -L%,$(MPI_LINK_FLAGS)))
MPI_FLAGS := -DUSE_MPI $(filter -I% -D%,$(MPI_COMPILE_FLAGS))
MPI_LIBS := $(filter -L% -l%,$(MPI_LINK_FLAGS)) $(foreach d,$(MPI_LIB_DIRS),-Xlinker -rpath -Xlinker $(d))
endif
NCCL_FLAGS :=
NCCL_LIBS :=
NCCL_HEADER := $(firstword $(wildcard /usr/include/nccl.h $(CUDA_HOME)/include/nccl.h))
ifneq ($(NCCL_HEADER),)
NCCL_FLAGS := -DUSE_NCCL -I$(dir $(NCCL_HEADER))
NCCL_LIBS := -lnccl
endif
# dist_flags/dist_libs USE_MPI USE_NCCL: the flags of one combination (auto = what was detected)
dist_flags = $(if $(filter auto,$(1)),$(MPI_FLAGS)) $(if $(filter auto,$(2)),$(NCCL_FLAGS))
dist_libs = $(if $(filter auto,$(1)),$(MPI_LIBS)) $(if $(filter auto,$(2)),$(NCCL_LIBS))
# as_system_includes FLAGS: FLAGS with each -I DIR as -isystem DIR, so that g++ keeps its warnings out of
# CUDA's, MPI's and NCCL's headers; /usr/include (nvcc in /usr/bin, NCCL's header there) is dropped (a default directory: as -isystem, it moves before
# libstdc++'s own headers and their #include_next <stdlib.h> fails).
as_system_includes = $(patsubst -I%,-isystem%,$(filter-out -I/usr/include -I/usr/include/,$(1)))
DIST_FLAGS := $(call dist_flags,$(USE_MPI),$(USE_NCCL))
DIST_LIBS := $(call dist_libs,$(USE_MPI),$(USE_NCCL))

LLMC_HEADERS := $(wildcard llmc/*.h llmc/*/*.h llmc/*/*.cuh llmc/*.cuh)

# --- the trainer and the generator -------------------------------------------------------------
# By nvcc, or (HOST_BUILD=1) by $(CXX) as C++ for the CPU backend, with MPI as detected and no NCCL.
# $(BUILD)/compiler-PROGRAM names the compiler of the program's last build, so that switching between
# `make` and `make cpu` rebuilds it, and only it: one stamp per program, so that an nvcc build of one
# and a host build of the other (`make train` and `make generate_gpt2_ls HOST_BUILD=0` on a machine
# without a GPU) do not rebuild each other (a stamp is rewritten only when it changes).
MAINS_COMPILER := $(if $(filter 1,$(HOST_BUILD)),$(CXX) $(HOST_BUILD_MARK),$(NVCC))
# HOST_OPT: the programs' host optimization level (test/test_build_matrix.py's no-nvcc build: -O0,
# it proves the build path and runs a few tiny steps)
HOST_OPT ?= -O3
HOST_CXXFLAGS := -std=c++17 $(HOST_OPT) -Wall -Wextra -fopenmp $(INCLUDES)
# MPI's headers as system headers: Open MPI's C++ bindings warn under -Wextra
HOST_DIST_FLAGS := $(call as_system_includes,$(call dist_flags,$(USE_MPI),0))
# A stamp is remade only when it names another compiler (decided when the Makefile is read), so that
# `make -n` and `make -q` tell the truth about the programs.
MAINS_STAMPS := $(BUILD)/compiler-train_gpt2_ls $(BUILD)/compiler-generate_gpt2_ls
stamp_stale = $(if $(subst x$(MAINS_COMPILER),,x$(shell cat $(1) 2>/dev/null)),FORCE)
$(foreach s,$(MAINS_STAMPS),$(eval $(s): $(call stamp_stale,$(s))))
$(MAINS_STAMPS):
	@mkdir -p $(dir $@)
	@echo '$(MAINS_COMPILER)' >$@
FORCE:
# The CUDA kernels of the programs, compiled once per precision (llmc/cuda/backend_entry.cu: the
# backend behind llmc/cuda/backend_entry.h) and linked into the trainer, its build matrix and the
# generator, whose own translation units then hold host code only.
CUDA_BACKEND_OBJ := $(BUILD)/cuda_backend_$(PRECISION).o
# A program with the CUDA backend: its source compiled once as C++ by $(CXX) (host code only; CUDA's
# headers as system headers) into $(BUILD)/obj/NAME.o ($(PROGRAM_HOST_OBJS)), then linked by nvcc with
# the kernels ($(CUDA_BACKEND_OBJ)) and the CUDA libraries (cuda_link). Its CPU kernel drivers come from
# $(NVCC_CPU_KERNELS) (CPU_KERNELS_INCLUDE, below). The trainer also links
# llmc/app/launch_collective.cpp, its one unit that USE_MPI and USE_NCCL change, compiled once per
# combination (launch_collective_obj; MPI's headers as system headers).
NVCC_CPU_KERNELS := $(BUILD)/obj/kernel_instances_$(PRECISION).o
CUDA_PROGRAM_CXXFLAGS := $(HOST_CXXFLAGS) -DENABLE_$(PRECISION) -DLLMC_CUDA_BACKEND=1 \
                         $(call as_system_includes,-I$(CUDA_HOME)/include)
# cuBLASLt is not linked: $(CUBLASLT_LOADER) defines the functions the programs call and loads the
# library on the first one (llmc/cuda/cublaslt_loader.cpp), so a start that never reaches the GPU (a
# --help, a refused flag, a CPU run) does not run its initializers (~0.1 s of CPU each).
# CUBLASLT_LAZY=0 links the library as the kernel labs and GPU tests do (the fallback should the loader
# fail on some machine).
# $(CUBLASLT_STAMP) names the mode of the last link ("lazy" or "linked"), rewritten only when it
# changes (as the compiler stamps above), so that switching relinks the programs and the build matrix.
CUBLASLT_LAZY ?= 1
ifeq ($(CUBLASLT_LAZY),0)
CUBLASLT_LOADER :=
CUBLASLT_MODE := linked
PROGRAM_CUDA_LIBS := -lcublasLt -lgomp
else
CUBLASLT_LOADER := $(BUILD)/obj/cublaslt_loader.o
CUBLASLT_MODE := lazy
PROGRAM_CUDA_LIBS := -lgomp -ldl
endif
CUBLASLT_STAMP := $(BUILD)/cublaslt-link
$(CUBLASLT_STAMP): $(if $(subst x$(CUBLASLT_MODE),,x$(shell cat $(CUBLASLT_STAMP) 2>/dev/null)),FORCE)
	@mkdir -p $(dir $@)
	@echo '$(CUBLASLT_MODE)' >$@
PROGRAM_HOST_OBJS := $(BUILD)/obj/train_gpt2_ls.o $(BUILD)/obj/generate_gpt2_ls.o
$(PROGRAM_HOST_OBJS): $(BUILD)/obj/%.o: %.cu $(LLMC_HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(CUDA_PROGRAM_CXXFLAGS) $(CPU_KERNELS_INCLUDE) -x c++ -c $< -o $@
# launch_collective_obj USE_MPI USE_NCCL: $(BUILD)/obj/launch_collective-mpi<auto|0>-nccl<auto|0>.o;
# in the rules of a stem <auto|0>-nccl<auto|0>, stem_mpi and stem_nccl are its two values
launch_collective_obj = $(BUILD)/obj/launch_collective-mpi$(1)-nccl$(2).o
stem_mpi = $(word 1,$(subst -nccl, ,$*))
stem_nccl = $(word 2,$(subst -nccl, ,$*))
$(BUILD)/obj/launch_collective-mpi%.o: llmc/app/launch_collective.cpp $(LLMC_HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(CUDA_PROGRAM_CXXFLAGS) $(call as_system_includes,$(call dist_flags,$(stem_mpi),$(stem_nccl))) -c $< -o $@
# cuda_link OBJECTS USE_MPI USE_NCCL: the link of a program ($@): its objects, the kernels, the CPU kernel
# drivers and cuBLASLt's loader, by nvcc
cuda_link = $(NVCC) $(NVCC_GENCODE) $(1) $(CUDA_BACKEND_OBJ) $(NVCC_CPU_KERNELS) $(CUBLASLT_LOADER) \
	  -o $@ $(PROGRAM_CUDA_LIBS) $(call dist_libs,$(2),$(3))
$(CUBLASLT_LOADER): llmc/cuda/cublaslt_loader.cpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra $(INCLUDES) $(call as_system_includes,-I$(CUDA_HOME)/include) \
	  -DLLMC_CUBLASLT_DIR='"$(CUDA_HOME)/lib64"' \
	  -c $< -o $@
ifeq ($(HOST_BUILD),1)
train_gpt2_ls generate_gpt2_ls: %: %.cu $(LLMC_HEADERS) $(BUILD)/compiler-%
	$(CXX) $(HOST_CXXFLAGS) $(HOST_DIST_FLAGS) -x c++ $< $(if $(filter train_gpt2_ls,$@),llmc/app/launch_collective.cpp) \
	  -o $@ $(call dist_libs,$(USE_MPI),0)
train_gpt2_ls: llmc/app/launch_collective.cpp
else
TRAINER_OBJS := $(BUILD)/obj/train_gpt2_ls.o $(call launch_collective_obj,$(USE_MPI),$(USE_NCCL))
train_gpt2_ls: $(CUDA_BACKEND_OBJ) $(NVCC_CPU_KERNELS) $(CUBLASLT_LOADER) $(TRAINER_OBJS) $(CUBLASLT_STAMP) \
  $(BUILD)/compiler-train_gpt2_ls
	$(call cuda_link,$(TRAINER_OBJS),$(USE_MPI),$(USE_NCCL))
generate_gpt2_ls: $(CUDA_BACKEND_OBJ) $(NVCC_CPU_KERNELS) $(CUBLASLT_LOADER) $(BUILD)/obj/generate_gpt2_ls.o \
  $(CUBLASLT_STAMP) $(BUILD)/compiler-generate_gpt2_ls
	$(call cuda_link,$(BUILD)/obj/generate_gpt2_ls.o,0,0)
endif
# $(ARCH_STAMP) names the CUDA_ARCH list of the device code in $(BUILD), rewritten only when it changes
# (as the stamps above), so that a build for other architectures rebuilds the device code: a trainer
# built with CUDA_ARCH=90 would otherwise stand for the default "80 90" (`make -q` saying it is up to
# date), and an A100 would find no kernel image in it. Every target nvcc compiles device code for
# depends on it (the programs and the tests that link $(CUDA_BACKEND_OBJ) through it).
ARCH_STAMP := $(BUILD)/cuda-arch
$(ARCH_STAMP): $(if $(subst x$(strip $(CUDA_ARCH)),,x$(shell cat $(ARCH_STAMP) 2>/dev/null)),FORCE)
	@mkdir -p $(dir $@)
	@echo '$(strip $(CUDA_ARCH))' >$@
$(CUDA_BACKEND_OBJ): llmc/cuda/backend_entry.cu $(LLMC_HEADERS) $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
cpu:
	$(MAKE) HOST_BUILD=1 train_gpt2_ls generate_gpt2_ls

# The builds of many translation units (Catch2, ASan, emulated, and the nvcc build: the programs'
# host units, their build matrix, the kernel labs and the GPU tests) compile the CPU kernel drivers
# once per build directory (llmc/cpu/kernel_instances.cpp, DIR/kernel_instances*.o) and every other
# unit with their explicit instantiation declarations (-include llmc/cpu/kernel_instances.h),
# instead of compiling every SIMD twin again in each unit. The CPU programs (`make cpu`, the
# experiments' trainer) compile in one command each (the trainer's two units) and do not.
CPU_KERNELS_INCLUDE := -include llmc/cpu/kernel_instances.h
# for the nvcc build ($(NVCC_CPU_KERNELS)): by $(CXX) with the programs' host flags (nvcc's host
# compiler, -O3, OpenMP)
$(NVCC_CPU_KERNELS): llmc/cpu/kernel_instances.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CUDA_PROGRAM_CXXFLAGS) -MMD -MP -c $< -o $@
-include $(wildcard $(BUILD)/obj/kernel_instances_*.d)

# --- CPU tests (Catch2 v2, one binary) -------------------------------------------------------
TEST_SRCS := $(wildcard test/test_*.cpp)
TEST_OBJS := $(patsubst test/%.cpp,$(BUILD)/test/%.o,$(TEST_SRCS))
$(BUILD)/test/%.o: test/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(CPU_KERNELS_INCLUDE) -c $< -o $@
$(BUILD)/test/kernel_instances.o: llmc/cpu/kernel_instances.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@
$(BUILD)/test_cpu: $(BUILD)/test/catch_main.o $(TEST_OBJS) $(BUILD)/test/kernel_instances.o
	$(CXX) $(CXXFLAGS) $^ -o $@
-include $(wildcard $(BUILD)/test/*.d)

# --- GPU targets: kernel lab (dev/cuda) and GPU tests (test/gpu), compiled once each ---------
GPU_LAB_SRCS := $(wildcard dev/cuda/*.cu)
GPU_TEST_SRCS := $(wildcard test/gpu/*.cu)
GPU_LAB_BINS := $(patsubst dev/cuda/%.cu,$(BUILD)/dev/%,$(GPU_LAB_SRCS))
GPU_TEST_BINS := $(patsubst test/gpu/%.cu,$(BUILD)/test_gpu/%,$(GPU_TEST_SRCS))
# lab:adamw compares adamw_update_all with its host reference bit for bit: that reference must not
# contract to FMA (aarch64 hosts and -march flags would), as the emulated build's -ffp-contract=off.
$(BUILD)/dev/adamw: private NVCCFLAGS += -Xcompiler -ffp-contract=off
$(BUILD)/dev/%: dev/cuda/%.cu $(NVCC_CPU_KERNELS) $(LLMC_HEADERS) $(wildcard dev/cuda/*.cuh dev/cuda/*_candidates/*.cuh) \
  $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(CPU_KERNELS_INCLUDE) $< $(NVCC_CPU_KERNELS) -o $@ $(CUDA_LIBS)
$(BUILD)/test_gpu/%: test/gpu/%.cu $(NVCC_CPU_KERNELS) $(LLMC_HEADERS) $(wildcard test/*.h test/gpu/*.cuh) $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(DIST_FLAGS) $(CPU_KERNELS_INCLUDE) $< $(NVCC_CPU_KERNELS) -o $@ $(CUDA_LIBS) \
	  $(DIST_LIBS)
# The GPU tests that reach the CUDA backend only through llmc/cuda/backend_entry.h link the programs'
# compiled kernels ($(CUDA_BACKEND_OBJ); $(EMU_DIR)/cuda_backend.o in the emulated build) instead of
# compiling them again: the programs and these tests share one compilation of the device code. They
# have no device code of their own, so, as the programs' units, $(CXX) compiles them as host C++
# (CUDA's headers as system headers; nvcc's two host passes and cicc took twice as long: 29 vs 15
# CPU-s for test_cuda_generate) and nvcc links them. Their object is $(BUILD)/obj/test_gpu/NAME.o; being
# host code, they take the host flags (HOST_OPT, CUDA_PROGRAM_CXXFLAGS), not NVCCFLAGS.
BACKEND_ENTRY_TESTS := test_cuda_model test_cuda_attention_probs test_cuda_param_scale test_cuda_generate
BACKEND_ENTRY_TEST_BINS := $(addprefix $(BUILD)/test_gpu/,$(BACKEND_ENTRY_TESTS))
$(BACKEND_ENTRY_TEST_BINS): $(BUILD)/test_gpu/%: test/gpu/%.cu $(CUDA_BACKEND_OBJ) $(NVCC_CPU_KERNELS) $(LLMC_HEADERS) \
  $(wildcard test/*.h test/gpu/*.cuh)
	@mkdir -p $(dir $@) $(BUILD)/obj/test_gpu
	$(CXX) $(CUDA_PROGRAM_CXXFLAGS) $(call as_system_includes,$(DIST_FLAGS)) $(CPU_KERNELS_INCLUDE) -x c++ -c $< \
	  -o $(BUILD)/obj/test_gpu/$*.o
	$(NVCC) $(NVCC_GENCODE) $(BUILD)/obj/test_gpu/$*.o $(CUDA_BACKEND_OBJ) $(NVCC_CPU_KERNELS) -o $@ $(CUDA_LIBS) \
	  $(DIST_LIBS)
gpu-targets: train_gpt2_ls generate_gpt2_ls $(GPU_LAB_BINS) $(GPU_TEST_BINS)

# The trainer in the other USE_MPI x USE_NCCL combinations (the default build is auto x auto), so a
# machine with NCCL but no MPI (or the reverse, or neither) cannot meet a compile error first.
# build/matrix/train_gpt2_ls-mpi<auto|0>-nccl<auto|0>; `make test` builds them.
DIST_MATRIX := $(BUILD)/matrix/train_gpt2_ls-mpi0-ncclauto $(BUILD)/matrix/train_gpt2_ls-mpiauto-nccl0 \
               $(BUILD)/matrix/train_gpt2_ls-mpi0-nccl0
# Each links the default build's host unit ($(BUILD)/obj/train_gpt2_ls.o, which reads neither macro)
# with its own compile of llmc/app/launch_collective.cpp, the unit that does.
$(BUILD)/matrix/train_gpt2_ls-mpi%: $(CUDA_BACKEND_OBJ) $(NVCC_CPU_KERNELS) $(CUBLASLT_LOADER) $(BUILD)/obj/train_gpt2_ls.o \
  $(BUILD)/obj/launch_collective-mpi%.o $(CUBLASLT_STAMP)
	@mkdir -p $(dir $@)
	$(call cuda_link,$(BUILD)/obj/train_gpt2_ls.o $(BUILD)/obj/launch_collective-mpi$*.o,$(stem_mpi),$(stem_nccl))
# (kept after the link: make would delete them as intermediate files of a pattern rule)
.SECONDARY: $(patsubst $(BUILD)/matrix/train_gpt2_ls-mpi%,$(BUILD)/obj/launch_collective-mpi%.o,$(DIST_MATRIX))
# and the NCCL test built without NCCL: it must exit 77 (SKIPPED), never 0 (test/test_build_matrix.py)
DIST_MATRIX += $(BUILD)/matrix/test_collective_nccl-nccl0
$(BUILD)/matrix/test_collective_nccl-nccl0: test/gpu/test_collective_nccl.cu $(LLMC_HEADERS) $(wildcard test/gpu/*.cuh) \
  $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(CUDA_LIBS)
dist-matrix: $(DIST_MATRIX)

ifeq ($(NVCC_FOUND),)
all: train_gpt2_ls generate_gpt2_ls $(BUILD)/test_cpu
else
all: train_gpt2_ls generate_gpt2_ls $(BUILD)/test_cpu gpu-targets
endif
.DEFAULT_GOAL := all

# --- sanitizers' UBSan ------------------------------------------------------------------------
# Every build with UBSan (the emulated build, build/asan, the fuzzers) leaves out two of its checks,
# whose work AddressSanitizer already does or no test can reach, and which together were a third of
# those builds' compile time at -O1 (the emulated backend 114 -> 57 s, the CPU kernels' object 158 ->
# 80 s, on 2 cores; docs/design.md "What `make test` spends its time on"): object-size (an access past the object the compiler
# can size, which ASan reports for every object) and pointer-overflow (pointer arithmetic that wraps
# the address space: offsets near 2^63 bytes).
UBSAN_LEFT_OUT := -fno-sanitize=object-size,pointer-overflow
# The CPU kernels' object and, emulated, the labs, the tests of test/gpu but $(BACKEND_ENTRY_TESTS) and
# the emulator's own tests also leave out ASan's use-after-scope checks, which poison and
# unpoison every local of every inlined helper at its scope's ends: a third to a half of those
# compiles (the CPU flash kernels 81 -> 44 CPU-s, the emulated attention lab 101 -> 71; docs/design.md
# "At stop 82"). Their locals are register values (tile accumulators, fragments) whose address never
# outlives them; ASan's stack redzones and UBSan's bounds checks stay. Code that runs the kernels from
# the host keeps them: the emulated backend (an async copy from a local whose scope has ended), the
# tests of $(BACKEND_ENTRY_TESTS), the trainer's and generator's own units, the emulator's library, the
# Catch2 units and the fuzzers (a view of a short std::string after its scope is caught by them alone).
KERNEL_SAN_LEFT_OUT := -fno-sanitize-address-use-after-scope

# --- device emulation (docs/emulation.md): the same .cu/.cuh sources built by the host compiler
# against dev/emu/ (fibers for threads, warp collectives, mma.sync from the PTX ISA, the
# runtime subset), with AddressSanitizer + UBSan, into build/emu/ (names as in build/dev, build/test_gpu).
# Targets left out of the emulated build: EMU_SKIP (the NCCL test until dev/emu/nccl.cpp exists).
EMU_CXX ?= $(CXX)
# build/emu (BF16, the default) or build/emu-fp32 (PRECISION=FP32)
EMU_DIR := $(BUILD)/emu$(if $(filter FP32,$(PRECISION)),-fp32)
# EMU_SAN: the sanitizers the emulated sources are compiled with (test_emulation.py's mutants: ASan
# only, ~2.5x faster to compile than ASan + UBSan at -O1). The rules compile and link in one g++
# command, whose -fsanitize flags apply to the compile too: EMU_LDFLAGS names EMU_SAN's, and links
# UBSan's runtime by name (-lubsan, g++'s) where EMU_SAN leaves UBSan out, for the emulator's and
# the CPU kernels' objects, which are compiled with it.
EMU_SAN_ALL := -fsanitize=address,undefined $(UBSAN_LEFT_OUT) -fno-sanitize-recover=undefined -fno-omit-frame-pointer
EMU_SAN ?= $(EMU_SAN_ALL)
# EMU_OPT: the optimization level of the emulated sources (test_emulation.py's mutants: -O0, a
# third of -O1's compile time for the attention lab; its one-shape checks then run ~2x slower)
EMU_OPT ?= -O1
# EMU_DEBUG: the debug information (-g1: line tables for the sanitizers' and the emulator's reports;
# test_emulation.py's mutants: -g0, a fifth less compile time, their expected reports need no lines)
EMU_DEBUG ?= -g1
EMU_CXXFLAGS := -std=c++17 $(EMU_OPT) $(EMU_DEBUG) -Wall -Wno-unknown-pragmas -ffp-contract=off -fopenmp $(EMU_SAN) -DLLMC_EMULATE \
                -DENABLE_$(PRECISION) -Idev/emu/include -include dev/emu/include/cuda_runtime.h \
                $(INCLUDES) -I$(CUDA_HOME)/include
EMU_LDFLAGS := $(EMU_SAN) $(if $(findstring undefined,$(EMU_SAN)),,-lubsan) -rdynamic -fopenmp -lboost_context
EMU_NCCL := $(if $(wildcard dev/emu/nccl.cpp),-DUSE_NCCL)
EMU_SKIP ?= $(if $(EMU_NCCL),,test_collective_nccl)
EMU_HEADERS := $(LLMC_HEADERS) $(wildcard dev/emu/*.h dev/emu/*.inc dev/emu/include/*.h)
EMU_LAB_BINS := $(filter-out $(addprefix $(EMU_DIR)/dev/,$(EMU_SKIP)),$(patsubst dev/cuda/%.cu,$(EMU_DIR)/dev/%,$(GPU_LAB_SRCS)))
EMU_TEST_BINS := $(filter-out $(addprefix $(EMU_DIR)/test_gpu/,$(EMU_SKIP)),$(patsubst test/gpu/%.cu,$(EMU_DIR)/test_gpu/%,$(GPU_TEST_SRCS)))
EMU_SELF_BINS := $(patsubst dev/emu/tests/%.cu,$(EMU_DIR)/self/%,$(wildcard dev/emu/tests/*.cu))
# the emulated CUDA runtime, cuBLASLt and NCCL, and the launch and block code (grid.cpp, block.cpp):
# every dev/emu/*.cpp, linked instead of libcudart / libcublasLt / libnccl. Built once, into build/emu,
# for both precisions: dev/emu/*.cpp read no ENABLE_* macro (their preprocessed text is the same
# under -DENABLE_BF16 and -DENABLE_FP32; the static shared-memory table holds both builds' kernels).
EMU_LIB := $(BUILD)/emu/libemu.a
EMU_OBJS := $(patsubst dev/emu/%.cpp,$(BUILD)/emu/%.o,$(wildcard dev/emu/*.cpp))
$(EMU_OBJS): $(BUILD)/emu/%.o: dev/emu/%.cpp
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) -MMD -MP -c $< -o $@
$(EMU_LIB): $(EMU_OBJS)
	rm -f $@ && ar rcs $@ $^
# (the CPU references' kernels from $(EMU_CPU_KERNELS), compiled once: CPU_KERNELS_INCLUDE above).
# One object for both precisions and for the ASan build: the ASan build's ($(ASAN_CPU_KERNELS),
# below; its rule is there), compiled with the same sanitizers (ASan + UBSan) at the same -O1.
# kernel_instances.cpp reads no ENABLE_* or LLMC_EMULATE macro; only the emulated sources' own
# -ffp-contract=off does not apply to these CPU kernels, which then contract as the CPU programs'.
EMU_CPU_KERNELS := $(BUILD)/asan/kernel_instances.o
-include $(wildcard $(BUILD)/emu/*.d)
$(EMU_DIR)/dev/%: dev/cuda/%.cu $(EMU_LIB) $(EMU_CPU_KERNELS) $(EMU_HEADERS) $(wildcard dev/cuda/*.cuh dev/cuda/*_candidates/*.cuh)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(KERNEL_SAN_LEFT_OUT) $(CPU_KERNELS_INCLUDE) -x c++ $< -x none $(EMU_CPU_KERNELS) \
	  $(EMU_LIB) -o $@ $(EMU_LDFLAGS)
$(EMU_DIR)/test_gpu/%: test/gpu/%.cu $(EMU_LIB) $(EMU_CPU_KERNELS) $(EMU_HEADERS) $(wildcard test/*.h test/gpu/*.cuh)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(KERNEL_SAN_LEFT_OUT) $(CPU_KERNELS_INCLUDE) $(EMU_NCCL) -x c++ $< -x none \
	  $(EMU_CPU_KERNELS) $(EMU_LIB) -o $@ $(EMU_LDFLAGS)
# The tests of $(BACKEND_ENTRY_TESTS), emulated: their own unit is compiled once, into build/emu/obj, for
# both precisions, as the trainer's (below): they read no ENABLE_* macro (they ask the backend for
# its precision at run time), and each precision's link takes its own cuda_backend.o, first.
EMU_ENTRY_TEST_OBJS := $(patsubst %,$(BUILD)/emu/obj/test_gpu/%.o,$(BACKEND_ENTRY_TESTS))
$(EMU_ENTRY_TEST_OBJS): $(BUILD)/emu/obj/test_gpu/%.o: test/gpu/%.cu $(EMU_HEADERS) $(wildcard test/*.h test/gpu/*.cuh)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(CPU_KERNELS_INCLUDE) $(EMU_NCCL) -x c++ -c $< -o $@
$(addprefix $(EMU_DIR)/test_gpu/,$(BACKEND_ENTRY_TESTS)): $(EMU_DIR)/test_gpu/%: $(BUILD)/emu/obj/test_gpu/%.o \
  $(EMU_DIR)/cuda_backend.o $(EMU_CPU_KERNELS) $(EMU_LIB)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_DIR)/cuda_backend.o $< $(EMU_CPU_KERNELS) $(EMU_LIB) -o $@ $(EMU_LDFLAGS)
$(EMU_DIR)/self/%: dev/emu/tests/%.cu $(EMU_LIB) $(EMU_HEADERS) $(wildcard test/gpu/*.cuh)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(KERNEL_SAN_LEFT_OUT) -x c++ $< -x none $(EMU_LIB) -o $@ $(EMU_LDFLAGS)
# The trainer and the generator, emulated: the same .cu files, with --device cuda running the CUDA
# backend on the emulated device, MPI as detected, NCCL from the emulation (dev/emu/nccl.cpp).
# Their own translation units are compiled once, into build/emu, for both precisions: they read no
# ENABLE_* macro (the preprocessed text is the same in both; the precision lives in cuda_backend.o),
# so the FP32 emulated trainer links the BF16 build's object with its own backend.
EMU_BINS := $(EMU_DIR)/train_gpt2_ls $(EMU_DIR)/generate_gpt2_ls
EMU_MAIN_OBJS := $(BUILD)/emu/train_gpt2_ls.o $(BUILD)/emu/generate_gpt2_ls.o
# EMU_MAIN_OPT: their optimization level. Their own code is the host side (the loop, flags, files,
# sampling); the device code they run is cuda_backend.o's (EMU_OPT) and the CPU kernels are
# kernel_instances.o's, so -O0 halves their compile (the trainer's object: 58 s at -O0 against 132 s
# at -O1 on this repository's CI CPU) at no measurable run time. Rule: cuda_backend.o comes first on
# their link line. The inline functions both objects emit are linked from the first object that has
# them; with the -O0 object first, the emulated test runs took 15% longer (measured while the
# emulator's launch and block code was inline; it is now libemu.a's, and the rule keeps any inline
# code the two share at EMU_OPT).
EMU_MAIN_OPT ?= -O0
# The trainer's launch_collective.cpp (MPI as detected, NCCL from the emulation) likewise, once.
EMU_LAUNCH_OBJ := $(BUILD)/emu/launch_collective.o
$(EMU_MAIN_OBJS) $(EMU_LAUNCH_OBJ): EMU_CXXFLAGS := $(filter-out $(EMU_OPT),$(EMU_CXXFLAGS)) $(EMU_MAIN_OPT)
$(EMU_MAIN_OBJS): $(BUILD)/emu/%.o: %.cu $(EMU_HEADERS)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(CPU_KERNELS_INCLUDE) -x c++ -c $< -o $@
$(EMU_LAUNCH_OBJ): llmc/app/launch_collective.cpp $(EMU_HEADERS)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(MPI_FLAGS) $(EMU_NCCL) -c $< -o $@
$(EMU_DIR)/train_gpt2_ls: $(EMU_LAUNCH_OBJ)
$(EMU_BINS): $(EMU_DIR)/%: $(BUILD)/emu/%.o $(EMU_DIR)/cuda_backend.o $(EMU_CPU_KERNELS) $(EMU_LIB)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_DIR)/cuda_backend.o $(BUILD)/emu/$*.o $(if $(filter train_gpt2_ls,$*),$(EMU_LAUNCH_OBJ)) \
	  $(EMU_CPU_KERNELS) $(EMU_LIB) -o $@ $(EMU_LDFLAGS) $(MPI_LIBS)
# their kernels, compiled once (llmc/cuda/backend_entry.cu, as $(CUDA_BACKEND_OBJ) for nvcc)
$(EMU_DIR)/cuda_backend.o: llmc/cuda/backend_entry.cu $(EMU_HEADERS)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) -x c++ -c $< -o $@
emu: $(EMU_LAB_BINS) $(EMU_TEST_BINS) $(EMU_SELF_BINS) $(EMU_BINS)
# the FP32 emulated trainer (test/test_emulated_cuda.py), built by a sub-make inside the caller's
# parallel build
emu-fp32-trainer: $(EMU_CPU_KERNELS) $(BUILD)/emu/train_gpt2_ls.o $(EMU_LAUNCH_OBJ) $(EMU_LIB)  # built here, not by the sub-make beside this make's own
	+$(MAKE) --no-print-directory PRECISION=FP32 $(BUILD)/emu-fp32/train_gpt2_ls
.PHONY: emu-fp32-trainer

# scripts/gpu_check.sh against the emulated build (--emulate): every emulated test and lab check
# (stage test), each kernel launch run under two schedules of the threads (greedy-forward and
# greedy-reverse: dev/emu/block.h) whose results must be bit-identical (a race or a missing
# barrier ends the run naming the kernel), under AddressSanitizer + UBSan; the attention lab uses
# its --small matrix. The whole-backend tests (hundreds of launches of kernels the labs already
# race-check) and the attention lab's --sweep (tile and window edges) run under one schedule,
# EMU_BACKEND_SCHEDULES. GPU_CHECK_EMU_PARTS picks the stages:
# make test runs all but the FP32 stage (the whole FP32 emulated build and its runs, ~10 min on 2
# cores; its first stage runs the FP32 test_cuda_model); `make test-emu GPU_CHECK_EMU_PARTS=all`
# runs everything. The report: $(BUILD)/gpu_check_emu/report/report.txt.
# EMU_FP32_MODEL_CASES: the FP32 test_cuda_model's cases in the first stage (its filter, each part
# of which must match a case; empty: all 14, ~240 s on 2 cores). The default, ~50 s: the PyTorch
# fixtures (hd 32: MHSA, LS, all-local with QK-norm, soft-cap and z-loss, the paper code's model:
# no biases, erf, untied, QK-norm) and three C-64 cases (all-local with soft-cap, z-loss, untied;
# erf with biases; no biases with tanh and QK-norm), which take every option. Left out of FP32 here:
# the C-128 and C-96 cases (hd 64 in FP32 is test_emulated_cuda.py's FP32 trainer, QK-norm, soft-cap
# and z-loss with losses within 1e-4 of the CPU's; ragged T and L 3 are the BF16 run's). EMU_BF16_MODEL_CASES: the BF16 test_cuda_model's filter in the test stage; the default
# leaves out (its '-' parts) the MHSA and LS cases at C 128 without biases and with erf, ~25 s each:
# the options they add are the C-128 hd-64 case's (no biases, erf), the small cases' and the paper
# code's fixture, and their head layouts are the same cases' with biases ("": all 14; on a GPU all
# run).
EMU_SCHEDULES ?= greedy-forward,greedy-reverse
EMU_BACKEND_SCHEDULES ?= greedy-forward
GPU_CHECK_EMU_PARTS ?= build,first,test,sanitize,labs,bench,train,profile,e2e-small,e2e-d12
EMU_FP32_MODEL_CASES ?= local_softcap_zloss_untied,ls_bias_erf,ls_qknorm_nobias_tanh,hd32
EMU_BF16_MODEL_CASES ?= -mhsa_nobias_erf,-ls_g1_p4_nobias_erf
test-emu: emu
	rm -f build/gpu_check_emu/results.tsv  # this run's steps only in the report (gpu_check accumulates them)
	EMU_SCHEDULES=$(EMU_SCHEDULES) EMU_BACKEND_SCHEDULES=$(EMU_BACKEND_SCHEDULES) EMU_FP32_MODEL_CASES=$(EMU_FP32_MODEL_CASES) \
	  EMU_BF16_MODEL_CASES=$(EMU_BF16_MODEL_CASES) \
	  scripts/gpu_check.sh --emulate --part $(GPU_CHECK_EMU_PARTS) --out $(BUILD)/gpu_check_emu/report
	@echo "== emulated: gpu_check.sh --emulate passed (stages $(GPU_CHECK_EMU_PARTS); emulation, not a GPU) =="

# --- sanitizers -------------------------------------------------------------------------------
# make test-asan: the Catch2 suite, the trainer and the generator built by g++ for the CPU with
# AddressSanitizer + UBSan (-fno-sanitize-recover=undefined: any report fails the run) into
# build/asan/ (the same sources as $(BUILD)/test_cpu and the .cu files as C++, no MPI, no CUDA; with
# nvcc the emulated build's trainer and generator instead, ASAN_E2E_DIR below);
# runs the Catch2 suite, then scripts/asan_e2e.sh: a short training with checkpoints, a -x
# extension resume and a kill -9 + resume (both bit-identical to the uninterrupted run), a write
# that fails at the file-size limit and its resume, --eval-only with --dump-attention, and
# generate_gpt2_ls with and without its KV cache. `make test` runs both (its Catch2 run is this
# sanitized build; `make $(BUILD)/test_cpu` builds the -O2 one).
ASAN_DIR := $(BUILD)/asan
ASAN_SAN ?= -fsanitize=address,undefined $(UBSAN_LEFT_OUT) -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# (-Wno-maybe-uninitialized: GCC's false positives in libstdc++'s <regex> under -fsanitize, in catch.hpp)
# (-g1: line tables, all the sanitizers' stack traces need; a third less compile time than -g,
# as in the emulated build and the fuzzers)
ASAN_CXXFLAGS := -std=c++17 -O1 -g1 -Wall -Wextra -Wno-maybe-uninitialized -fopenmp -MMD -MP $(ASAN_SAN) $(INCLUDES)
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:exitcode=86 UBSAN_OPTIONS=print_stacktrace=1:exitcode=86
# The units that instantiate the training loop (llmc/train/train_loop.h) or the run record compile as
# one object, a generated file that includes each: the loop's templates are then compiled once, not
# five times (51 CPU-s against 153 s apart at cafec2b). Each stays its own file; a helper name two of
# them share is a compile error here, and is renamed.
ASAN_TEST_GROUP := test_stop_agreement test_plan_run test_near_far_stats test_hostile_input test_run_record
ASAN_TEST_GROUP_OBJ := $(ASAN_DIR)/test/train_loop_group.o
ASAN_TEST_OBJS := $(filter-out $(addprefix $(ASAN_DIR)/test/,$(addsuffix .o,$(ASAN_TEST_GROUP))), \
                    $(patsubst test/%.cpp,$(ASAN_DIR)/test/%.o,$(TEST_SRCS))) $(ASAN_TEST_GROUP_OBJ)
ASAN_CPU_KERNELS := $(ASAN_DIR)/kernel_instances.o
# The Catch2 units at -O0 (about half of -O1's compile time; the sanitizers check -O0 code at least
# as closely), but for the five whose cases run long enough that -O0 would cost more than it saves
# (measured with Catch2's --durations: +9 to +17 s each at -O0; the others within ~5 s together).
ASAN_TEST_O1 := test_cpu_model test_cpu_ops test_kv_cache test_vec_exp test_vec_tanh
ASAN_TEST_OPT := -O0
$(addprefix $(ASAN_DIR)/test/,$(addsuffix .o,$(ASAN_TEST_O1))): private ASAN_TEST_OPT := -O1
# The Catch2 units leave out two of UBSan's checks, null and alignment, which together are a third of
# their compile time (a check before every access through a pointer): ASan reports a null access
# (SEGV on address 0), and the code under test keeps both checks where it is built as the programs
# and kernels are: the CPU kernels' object, the emulated kernels, asan-e2e's trainer and generator,
# and the fuzzers of every reader of user files.
ASAN_TEST_SAN := -fno-sanitize=null,alignment
$(ASAN_DIR)/test/%.o: test/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(ASAN_CXXFLAGS) $(ASAN_TEST_SAN) $(ASAN_TEST_OPT) $(CPU_KERNELS_INCLUDE) -c $< -o $@
$(ASAN_DIR)/test/train_loop_group.cpp: Makefile
	@mkdir -p $(dir $@)
	printf '#include "test/%s.cpp"\n' $(ASAN_TEST_GROUP) >$@
$(ASAN_TEST_GROUP_OBJ): $(ASAN_DIR)/test/train_loop_group.cpp
	$(CXX) $(ASAN_CXXFLAGS) $(ASAN_TEST_SAN) $(ASAN_TEST_OPT) $(CPU_KERNELS_INCLUDE) -c $< -o $@
# (also the emulated build's CPU kernels, EMU_CPU_KERNELS above)
$(ASAN_CPU_KERNELS): llmc/cpu/kernel_instances.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(ASAN_CXXFLAGS) $(KERNEL_SAN_LEFT_OUT) -c $< -o $@
# Catch2's runner (catch.hpp's implementation, no code of ours) at -O0 and without the sanitizers:
# 10 instead of 29 CPU-s. It comes last on the link line: the linker keeps the first copy of an
# inline function (catch.hpp's, the standard library's) that several objects emit, and so takes the
# sanitized units' copies.
$(ASAN_DIR)/test/catch_main.o: test/catch_main.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(filter-out $(ASAN_SAN),$(ASAN_CXXFLAGS)) -O0 -c $< -o $@
$(ASAN_DIR)/test_cpu: $(ASAN_TEST_OBJS) $(ASAN_CPU_KERNELS) $(ASAN_DIR)/test/catch_main.o
	$(CXX) $(ASAN_CXXFLAGS) $^ -o $@
$(ASAN_DIR)/train_gpt2_ls $(ASAN_DIR)/generate_gpt2_ls: $(ASAN_DIR)/%: %.cu $(ASAN_CPU_KERNELS) $(LLMC_HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(ASAN_CXXFLAGS) $(CPU_KERNELS_INCLUDE) -x c++ $< $(if $(filter train_gpt2_ls,$*),llmc/app/launch_collective.cpp) \
	  -x none $(ASAN_CPU_KERNELS) -o $@
$(ASAN_DIR)/train_gpt2_ls: llmc/app/launch_collective.cpp
-include $(wildcard $(ASAN_DIR)/test/*.d $(ASAN_DIR)/*.d)
# The end-to-end runs' programs: with nvcc, the emulated build's trainer and generator ($(EMU_DIR):
# the same sources under the same ASan + UBSan, their own code at -O0 (EMU_MAIN_OPT) and the CPU
# kernels' object at -O1 as build/asan's, with MPI and the emulated CUDA backend linked;
# asan_e2e.sh runs them with --device cpu), which make test builds anyway; without nvcc, build/asan's
# (CPU only, no MPI). ASAN_E2E_DIR=$(ASAN_DIR) picks those where nvcc is found.
ASAN_E2E_DIR ?= $(if $(NVCC_FOUND),$(EMU_DIR),$(ASAN_DIR))
ASAN_BINS := $(ASAN_DIR)/test_cpu $(ASAN_E2E_DIR)/train_gpt2_ls $(ASAN_E2E_DIR)/generate_gpt2_ls
test-asan: $(ASAN_BINS)
	@echo "== Catch2 under ASan + UBSan ($(ASAN_DIR)/test_cpu) =="
	$(ASAN_ENV) $(ASAN_DIR)/test_cpu
	@$(MAKE) --no-print-directory asan-e2e
	@echo "== make test-asan passed =="
asan-e2e: $(ASAN_E2E_DIR)/train_gpt2_ls $(ASAN_E2E_DIR)/generate_gpt2_ls
	@echo "== end to end under ASan + UBSan (scripts/asan_e2e.sh $(ASAN_E2E_DIR)) =="
	SHARED_DATA=$(abspath $(SHARED_DATA)) scripts/asan_e2e.sh $(ASAN_E2E_DIR)
.PHONY: asan-e2e
.PHONY: test-asan

# --- data ------------------------------------------------------------------------------------
TS_DIR := data/shards/tinyshakespeare_gpt2
$(TS_DIR)/meta.json:
	GPT2_BPE_DIR=$(SHARED_DATA)/gpt2 $(PYTHON) data/prepare.py --dataset tinyshakespeare \
	  --source $(SHARED_DATA)/tinyshakespeare/input.txt --out $(TS_DIR) --tokenizer gpt2
data-tinyshakespeare: $(TS_DIR)/meta.json

# --- the main job ----------------------------------------------------------------------------
# A new run in TRAIN_OUT trains on tiny Shakespeare with TRAIN_ARGS_NEW followed by the TRAIN_ARGS given
# (a flag given twice takes the last value: TRAIN_ARGS="-x 1000" changes the steps only). Run
# again once TRAIN_OUT holds a run (its config.json), it continues that run (-y 1: from its newest
# checkpoint, or from step 0 when it has none yet) with the settings recorded there, its data
# included, and only TRAIN_ARGS (given on the make command line or in the environment) override
# them: the defaults (TRAIN_ARGS_NEW and the tiny Shakespeare -i/-j) never do (docs/training.md
# "Resuming and forking").
TRAIN_ARGS_NEW := -x 300 -v 50 -s 100 -n 100
TRAIN_ARGS ?=
TRAIN_OUT ?= out/tinyshakespeare
TRAIN_RESUMES = $(wildcard $(TRAIN_OUT)/config.json)
# (none with a --config or --fork-from in TRAIN_ARGS, nor tiny Shakespeare's -i/-j: typed flags win
# over a config file's and over the settings a fork takes from its source run, so they would replace
# that data, -x, -v, -s and -n)
TRAIN_SETTINGS_GIVEN = $(filter --config --config=% --fork-from --fork-from=%,$(TRAIN_ARGS))
TRAIN_NEW_DEFAULTS = $(if $(TRAIN_SETTINGS_GIVEN),,-i "$(TS_DIR)/train_*.bin" -j "$(TS_DIR)/val_*.bin" $(TRAIN_ARGS_NEW))
# ... and one line on stderr says so (a new-user trial: only this comment did), naming the flag and where
# the data and settings come from instead
TRAIN_SETTINGS_FLAG = $(firstword $(subst =, ,$(firstword $(TRAIN_SETTINGS_GIVEN))))
ifneq ($(filter train,$(MAKECMDGOALS)),)
ifneq ($(TRAIN_SETTINGS_GIVEN),)
ifeq ($(TRAIN_RESUMES),)
SAID = make train: TRAIN_ARGS has $(TRAIN_SETTINGS_FLAG): the new run in $(TRAIN_OUT) gets none of make train's \
  defaults (tiny Shakespeare's -i/-j and $(TRAIN_ARGS_NEW)); its data and settings come from \
  $(if $(filter --config,$(TRAIN_SETTINGS_FLAG)),the file,the source run) and the flags given; \
  add them to TRAIN_ARGS to keep them
$(SAY)
endif
endif
endif
train: train_gpt2_ls $(TS_DIR)/meta.json
	./train_gpt2_ls $(if $(TRAIN_RESUMES),-o $(TRAIN_OUT) -y 1 $(TRAIN_ARGS),\
	  $(TRAIN_NEW_DEFAULTS) -o $(TRAIN_OUT) $(TRAIN_ARGS))

# --- tests -----------------------------------------------------------------------------------
JOBS ?= $(shell nproc)
# make test: every build first, in one parallel make (the nvcc GPU targets only compile here; with
# them the FP32 emulated trainer, the static SASS report and the Tiny Shakespeare shards), then two
# lanes side by side (each mostly one thread; CI has 2 cores): in the background the emulated GPU
# tests (make test-emu), then the fuzz smoke test (make fuzz-smoke: every committed crash input,
# then a few seconds of fuzzing per harness), then the pytest files PYTEST_BACKGROUND; in the
# foreground the Catch2 suite under ASan + UBSan, pytest and the sanitized end-to-end runs (make
# asan-e2e). The lanes run with
# OMP_WAIT_POLICY=PASSIVE: an OpenMP thread that spins while it waits takes the core from the other
# lane (results do not depend on it; thread counts are unchanged). A "== wall time:" line names the
# seconds of each part (CI must stay under 30 minutes on 2 cores: it shows where they go).
# Without nvcc: the same minus the GPU targets, the trainer matrix and the emulation (builds and
# lane), and minus the pytest tests of those builds (PYTEST_NEEDS_NVCC); one line says so. CI=true
# without nvcc is an error: CI runs everything.
PYTEST_NEEDS_NVCC := test/test_emulated_cuda.py test/test_emulation.py test/test_emulation_cublaslt.py \
                     test/test_cublaslt_loader.py::test_the_loader_forwards_to_the_library \
                     test/test_cublaslt_loader.py::test_a_library_that_cannot_be_found_is_one_line_naming_it_and_the_fix \
                     test/test_emulation_nccl.py test/test_emu_step_report.py test/test_static_smem_table.py \
                     test/test_build_matrix.py::test_every_combination_builds_and_runs \
                     test/test_build_matrix.py::test_mpirun_of_a_build_without_mpi_says_what_is_missing \
                     test/test_build_matrix.py::test_nccl_test_without_nccl_is_skipped_not_passed
ifeq ($(NVCC_FOUND),)
test-build: $(ASAN_BINS) train_gpt2_ls generate_gpt2_ls  # and the fuzzers ($(FUZZ_BINS), below)
PYTEST_LEFT_OUT := $(addprefix --deselect ,$(PYTEST_NEEDS_NVCC))
else
test-build: $(ASAN_BINS) gpu-targets dist-matrix emu  # and the fuzzers ($(FUZZ_BINS), below)
# pytest files that run in the background lane, after the fuzz smoke test: three of the emulated
# build, the attention-map plots, the CPU-vs-PyTorch table, SentencePiece generation and the build
# matrix (the foreground lane is the longer one: this evens them out; at cf3b565 the lanes took 989 s
# in the foreground and 904 s in the background before the CPU-vs-PyTorch table and SentencePiece
# generation moved; the build matrix's no-nvcc build, ~40 s, moved when the background lost ~150 s)
PYTEST_BACKGROUND := test/test_emulation_cublaslt.py test/test_emulation_nccl.py test/test_emu_step_report.py \
                     test/test_attention_maps.py test/test_cpu_vs_torch.py test/test_generate_sp.py \
                     test/test_build_matrix.py
PYTEST_LEFT_OUT := $(addprefix --ignore=,$(PYTEST_BACKGROUND))
endif
test:
ifeq ($(NVCC_FOUND),)
ifeq ($(CI),true)
	@echo "error: CI=true but no nvcc ('$(NVCC)' not on PATH): CI runs the GPU targets and the emulated tests; install the CUDA toolkit" >&2; exit 1
endif
	@echo "== no nvcc: CPU tests only; the GPU targets, the trainer matrix and the emulated GPU tests need nvcc (CUDA toolkit) =="
endif
	scripts/check_format.sh
ifneq ($(NVCC_FOUND),)
	@echo "== builds (make test-build; the FP32 emulated trainer; make sass-report: the static SASS report of the sm_90 kernels, not measured on a GPU; the Tiny Shakespeare shards) =="
endif
	@mkdir -p $(BUILD); date +%s >$(BUILD)/test-build.start
	$(MAKE) -j$(JOBS) test-build $(if $(NVCC_FOUND),emu-fp32-trainer sass-report) $(TS_DIR)/meta.json
	@echo "== in the background, log $(BUILD)/background.log:$(if $(NVCC_FOUND), the emulated GPU tests and kernels (make test-emu: scripts/gpu_check.sh --emulate; ASan + UBSan, two schedules)$(comma) then) the fuzz smoke test (make fuzz-smoke)$(if $(PYTEST_BACKGROUND),$(comma) then pytest $(PYTEST_BACKGROUND)) =="
	@export OMP_WAIT_POLICY=PASSIVE; rm -f $(BUILD)/background.rc; now() { date +%s; }; \
	t=$$(now); secs="builds $$((t - $$(cat $(BUILD)/test-build.start)))s"; \
	{ $(if $(NVCC_FOUND),$(MAKE) --no-print-directory test-emu; e=$$?,e=0); te=$$(now); \
	  echo "== fuzz smoke test (make fuzz-smoke) =="; $(MAKE) --no-print-directory fuzz-smoke; f=$$?; tf=$$(now); \
	  $(if $(PYTEST_BACKGROUND),echo "== background pytest: $(PYTEST_BACKGROUND) =="; \
	    SHARED_DATA=$(abspath $(SHARED_DATA)) $(PYTHON) -m pytest -q -p no:cacheprovider --durations=5 $(PYTEST_BACKGROUND); p=$$?,p=0); \
	  echo "$$e $$f $$p $$((te - t)) $$((tf - te)) $$(($$(now) - tf))" >$(BUILD)/background.rc; } >$(BUILD)/background.log 2>&1 & background=$$!; \
	echo "== Catch2 (C++ CPU tests) under ASan + UBSan ($(ASAN_DIR)/test_cpu) =="; \
	$(ASAN_ENV) $(ASAN_DIR)/test_cpu; catch2=$$?; t1=$$(now); secs="$$secs, Catch2 $$((t1 - t))s"; \
	echo "== pytest (data pipeline, end to end, emulation faults and mutants) =="; \
	SHARED_DATA=$(abspath $(SHARED_DATA)) $(if $(NVCC_FOUND),SASS_REPORT_JSON=$(abspath $(SASS_REPORT_JSON))) \
	  $(PYTHON) -m pytest -q --durations=25 data/tests test $(PYTEST_LEFT_OUT); py=$$?; \
	t2=$$(now); secs="$$secs, pytest $$((t2 - t1))s"; \
	$(MAKE) --no-print-directory asan-e2e; asan=$$?; t3=$$(now); secs="$$secs, asan-e2e $$((t3 - t2))s"; \
	wait $$background; emu_rc=1; fuzz=1; py_bg=1; read emu_rc fuzz py_bg emu_s fuzz_s py_bg_s <$(BUILD)/background.rc; \
	secs="$$secs; in the background:$(if $(NVCC_FOUND), test-emu $${emu_s}s then) fuzz-smoke $${fuzz_s}s$(if $(PYTEST_BACKGROUND), then pytest $${py_bg_s}s); the lanes $$(($$(now) - t))s"; \
	echo "==$(if $(NVCC_FOUND), make test-emu and) make fuzz-smoke$(if $(PYTEST_BACKGROUND), and the background pytest) (from $(BUILD)/background.log) =="; cat $(BUILD)/background.log; \
	echo "== wall time: $$secs =="; \
	if [ $$catch2 -ne 0 ] || [ $$py -ne 0 ] || [ $$py_bg -ne 0 ] || [ $$asan -ne 0 ] || [ $$fuzz -ne 0 ] || [ $$emu_rc -ne 0 ]; then \
	  echo "== FAILED: Catch2 exit $$catch2, pytest exit $$py, background pytest exit $$py_bg, make asan-e2e exit $$asan, make fuzz-smoke exit $$fuzz, make test-emu exit $$emu_rc =="; exit 1; fi
ifneq ($(NVCC_FOUND),)
	@echo "== all CPU tests passed (Catch2 and the end-to-end runs also under ASan + UBSan; fuzz smoke test); GPU kernels passed EMULATED (not on a GPU): $(EMU_LAB_BINS) $(EMU_TEST_BINS) =="
	@echo "== GPU targets compiled (nvcc): $(GPU_LAB_BINS) $(GPU_TEST_BINS) train_gpt2_ls $(DIST_MATRIX) =="
else
	@echo "== all CPU tests passed (Catch2 and the end-to-end runs also under ASan + UBSan; fuzz smoke test); NOT run without nvcc: the GPU targets, the trainer matrix, the emulated GPU tests =="
endif

# The PyTorch reference's self-tests and a byte check of the committed fixtures; needs torch
# (Debian's python3-torch for /usr/bin/python3, or pip's). Not part of `make test` (CI has no torch).
TORCH_PYTHON ?= /usr/bin/python3
test-reference:
	$(TORCH_PYTHON) dev/reference/test_gpt2_ls.py
	$(TORCH_PYTHON) dev/reference/make_fixtures.py --check

# GPU tests: every test/gpu binary, then every kernel lab in validation-only mode (--check:
# several shapes against the CPU reference, no timing; exit status = verdict). Exit 77 is a test
# that could not run in this build (gpu_test::kSkipExitCode): listed as SKIPPED (not run), not passed.
test-gpu: $(GPU_TEST_BINS) $(GPU_LAB_BINS)
	@skipped=""; for t in $(GPU_TEST_BINS); do echo "== $$t =="; rc=0; $$t || rc=$$?; \
	  if [ $$rc -eq 77 ]; then skipped="$$skipped $$t"; elif [ $$rc -ne 0 ]; then exit $$rc; fi; done; \
	for t in $(GPU_LAB_BINS); do echo "== $$t --check =="; $$t --check || exit $$?; done; \
	if [ -n "$$skipped" ]; then echo "== GPU tests passed; SKIPPED (not run in this build):$$skipped =="; \
	else echo "== GPU tests passed (none skipped) =="; fi

# --- fuzzing ----------------------------------------------------------------------------------
# One libFuzzer harness per reader of user files (test/fuzz/fuzz_<name>.cpp: shards + data loader,
# model files, llm.c checkpoints, training state, tokenizer.bin, tokenizer.model, the GPT-2 BPE and
# SentencePiece encoders, the --config file, the data's meta.json / tokenizer.bin vocabulary, the
# checkpoint directory's names and pruning), built by clang++ (Debian's clang 14) with
# -fsanitize=fuzzer,address,undefined into build/fuzz/; docs/reliability.md has the results.
#   make fuzz        each harness for FUZZ_SECONDS (default 600), one after the other, from its seeds
#                    test/fuzz/corpus/<name>/ plus what earlier runs found (build/fuzz/corpus/<name>/)
#   make fuzz-smoke  replays the committed crash inputs test/fuzz/regressions/<name>/, then fuzzes
#                    each harness FUZZ_SMOKE_SECONDS (default 3); one line per harness, non-zero exit
#                    on any finding (crash, sanitizer report, uncaught exception, hang, > 2 GB malloc)
# FUZZ_NAMES="shard config" picks harnesses; test/fuzz/run_fuzz.sh runs them (--help).
FUZZ_DIR := $(BUILD)/fuzz
FUZZ_CXX ?= clang++
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 3
FUZZ_CXXFLAGS := -std=c++17 -O1 -g1 -Wall -Wextra -fsanitize=fuzzer,address,undefined $(UBSAN_LEFT_OUT) \
                 -fno-sanitize-recover=undefined \
                 -fno-omit-frame-pointer -DLLMC_FUZZ_DIR='"$(abspath test/fuzz)"' $(INCLUDES)
FUZZ_NAMES ?= $(patsubst test/fuzz/fuzz_%.cpp,%,$(wildcard test/fuzz/fuzz_*.cpp))
FUZZ_BINS := $(addprefix $(FUZZ_DIR)/fuzz_,$(FUZZ_NAMES))
test-build: $(FUZZ_BINS)
$(FUZZ_DIR)/fuzz_%: test/fuzz/fuzz_%.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -MMD -MP -MT $@ -MF $@.d $< -o $@
-include $(wildcard $(FUZZ_DIR)/*.d)
fuzz: $(FUZZ_BINS)
	test/fuzz/run_fuzz.sh --seconds $(FUZZ_SECONDS) --bin-dir $(FUZZ_DIR) --work $(FUZZ_DIR) $(FUZZ_NAMES)
fuzz-smoke: $(FUZZ_BINS)
	@rm -rf $(FUZZ_DIR)/smoke
	test/fuzz/run_fuzz.sh --seconds $(FUZZ_SMOKE_SECONDS) --bin-dir $(FUZZ_DIR) --work $(FUZZ_DIR)/smoke $(FUZZ_NAMES)
.PHONY: fuzz fuzz-smoke

# --- static SASS report (dev/cuda/sass_report, docs/cuda_kernels.md) --------------------------
# Reads the sm_90 code of the programs' kernels as the nvcc build made them ($(CUDA_BACKEND_OBJ), which
# the trainer and the generator link; no second compile of the kernels; cuobjdump from the toolkit or from `make deps`). It prints a report and
# fails only when it cannot make one (tool missing, no sm_90 code, no kernel found).
SASS_REPORT_JSON := $(BUILD)/sass/report.json
sass-report: $(if $(filter 1,$(HOST_BUILD)),,$(CUDA_BACKEND_OBJ))
ifeq ($(HOST_BUILD),1)
	@echo "error: make sass-report reads the sm_90 code of the nvcc build; this build is by $(CXX) for the CPU (install the CUDA toolkit, or HOST_BUILD=0)" >&2; exit 1
endif
	$(PYTHON) dev/cuda/sass_report --build-dir $(BUILD)/sass --json $(SASS_REPORT_JSON) --nvcc $(NVCC) --cxx $(CXX) \
	  $(CUDA_BACKEND_OBJ)

# The host's work at a training step's boundary, timed on this CPU (dev/bench/host_boundary.cpp; a
# table on stdout: docs/cuda_backend.md, "Host work between steps"); make test builds and runs it once
# at a small shape (test/test_host_boundary_bench.py)
HOST_BOUNDARY_BENCH := $(BUILD)/host_boundary_bench
host-boundary-bench: $(HOST_BOUNDARY_BENCH)
$(HOST_BOUNDARY_BENCH): dev/bench/host_boundary.cpp $(LLMC_HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 $(HOST_OPT) -Wall -Wextra $(INCLUDES) $< -o $@
test-build: $(HOST_BOUNDARY_BENCH)

deps:
	scripts/install_deps.sh

clean:
	rm -rf $(BUILD) train_gpt2_ls generate_gpt2_ls

# The C++/CUDA sources against .clang-format (clang-format 14; scripts/check_format.sh)
format:
	scripts/check_format.sh --fix
format-check:
	scripts/check_format.sh

.PHONY: host-boundary-bench format format-check all cpu gpu-targets dist-matrix emu test-emu data-tinyshakespeare train test test-build test-gpu test-reference deps clean sass-report

endif  # DEPS_FIRST
