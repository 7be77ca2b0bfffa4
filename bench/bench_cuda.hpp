// bench_cuda.hpp: what the modes of bench_cuda share (bench_cuda.cpp holds
// main and the stage mode; the transport and pipeline modes have files of
// their own).
#pragma once

#include "pipetrain/cuda/cuda.hpp"

namespace pt {

// H100/H200 SXM dense tensor-core peak in TFLOP/s of the GEMM precision:
// bf16 and fp16 989.4, tf32 494.7; fp32 (no tensor cores) 66.9.
double dense_peak_tflops(Precision p);

int run_transport_bench(int argc, char** argv);  // bench_cuda_transport.cpp
int run_pipeline_bench(int argc, char** argv);   // bench_cuda_pipeline.cpp

}  // namespace pt
