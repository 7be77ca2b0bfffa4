# pipetrain: top-level entry points. On a fresh machine each of `make run` and
# `make test` installs what is missing, builds, and runs.
#   make            build build/pipetrain
#   make test       build and run every test (CTest; MPI tests at 1, 2, 4 ranks)
#   make run        train the default job (a small GPT on Markov tokens) on NP ranks
#   make bench      the CPU benchmarks (tables in results/)
#   make cuda       build the CUDA backend, the application and the GPU tests in
#                   build-cuda (CMAKE_CUDA_ARCHITECTURES=90)
#   make gpu-bundle everything the GPU check runs, with the libraries a bare GPU
#                   machine lacks, in gpu-bundle/pipetrain-gpu.tar.xz (docs/gpu-check.md)
#   make test-gpu-bundle  rehearses that bundle here as the GPU machine sees it (CI)
#   make test-sanitize  ASan + UBSan build in build-asan: every test, then a
#                   short training run and its resume; fails on any report
#   make test-avx2  the GoogleTests again under a second CPU personality:
#                   oneDNN at most AVX2, OpenBLAS's Haswell kernels (CI runs it);
#                   those labelled kernel_free (no CPU kernel runs) are skipped
#   make test-slurm the batch scripts under a real single-node Slurm started
#                   for the test (installs slurm-wlm and munge; root; CI runs it)
#   make corpus     the quick start's tokenizer and token shards in runs/corpus,
#                   from CORPUS (default: /usr/share/common-licenses; docs/data.md)
BUILD    ?= build
NP       ?= 4
DECK     ?= inputs/gpt_markov.toml
JOBS     ?= $(shell nproc)
CMAKE_ARGS ?=

# Open MPI refuses root without these; CI and the dev machines run as root.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
MPIRUN := mpirun --oversubscribe --bind-to none

.PHONY: all deps configure build test test-avx2 test-slurm run bench cuda gpu-bundle test-gpu-bundle \
        tools corpus test-sanitize clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build tools
	cd $(BUILD) && ctest --output-on-failure -j 1

# The second CPU personality: whatever this CPU is, oneDNN's kernels are
# capped at AVX2 and OpenBLAS runs its Haswell kernels, so no test may
# depend on AVX-512 kernels (or on the default's rounding). docs/ci.md.
CPU_PERSONALITY_AVX2 := ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell
test-avx2: build
	cd $(BUILD) && $(CPU_PERSONALITY_AVX2) ctest -L gtest -LE kernel_free --output-on-failure -j 1

# Starts its own munged, slurmctld and slurmd (docs/cluster.md), stops them by PID.
test-slurm: build tools
	@scripts/install-deps.sh slurm-wlm slurm-client munge
	tests/slurm/test_slurm.sh $(BUILD)

run: build
	$(MPIRUN) -np $(NP) $(BUILD)/pipetrain train $(DECK)

tools:
	@scripts/setup-tools-venv.sh

# The quick start's data (inputs/gpt_corpus.toml): a 1024-token byte-level
# BPE trained on CORPUS (files, folders or globs), its last 10% held out.
CORPUS ?= /usr/share/common-licenses
corpus: tools
	tools/.venv/bin/python tools/make_token_file.py --out-dir runs/corpus --vocab-size 1024 \
	    --eval-fraction 0.1 $(CORPUS)

bench: build tools
	jobs/bench_speedup.sh
	jobs/bench_stage_efficiency.sh
	jobs/bench_recompute.sh
	jobs/bench_bubble.sh
	jobs/bench_trace_overhead.sh
	jobs/bench_checkpoint.sh
	jobs/bench_planner.sh
	jobs/bench_balance.sh
	jobs/bench_schedules.sh
	jobs/bench_rebalance.sh
	jobs/bench_rebalance_move.sh
	jobs/bench_data_parallel.sh
	jobs/bench_gemm.sh
	jobs/bench_gemm_limits.sh

# The CUDA build compiles and links the application and every target that
# uses the CUDA backend (the CPU-only tests are the default build's).
CUDA_TARGETS := pipetrain test_cuda_select test_cuda_kernels test_cuda_limits test_cuda_gpt test_cuda_attention test_cuda_epilogue test_cuda_conv test_cuda_runtime \
                test_cuda_transport test_cuda_pipeline test_cuda_features test_loss_scaler bench_cuda test_cuda_digest
# Configured every time (seconds), so that targets added since the last
# configure are known to the build.
# The cuDNN frontend's headers (fused attention) come from PyPI into third_party/.
cuda: deps
	@scripts/fetch-cudnn-frontend.sh
	cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DPIPETRAIN_CUDA=ON $(CMAKE_ARGS)
	cmake --build build-cuda -j $(JOBS) --target $(CUDA_TARGETS)

# Builds (make cuda) and packs the GPU check; tests/gpu/test_gpu_bundle.sh
# hides the system's copies of every bundled library and runs it up to the GPU.
gpu-bundle:
	@scripts/install-deps.sh xz-utils
	scripts/gpu-bundle.sh

test-gpu-bundle: gpu-bundle
	tests/gpu/test_gpu_bundle.sh gpu-bundle/pipetrain-gpu.tar.xz

# AddressSanitizer + UndefinedBehaviorSanitizer (gcc), -O1 -g1 (CMakeLists.txt).
# Runtime options, suppressions and the run: tests/sanitizers/. run.sh builds
# only the targets of the tests it runs (and the drivers).
test-sanitize: tools
	$(MAKE) BUILD=build-asan \
	  CMAKE_ARGS="-DPIPETRAIN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)" configure
	JOBS=$(JOBS) tests/sanitizers/run.sh build-asan

clean:
	rm -rf $(BUILD) build-cuda build-asan gpu-bundle
