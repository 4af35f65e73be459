#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
__global__ void axpy_kernel(const float *x, const float *y, float *out, float a, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}
torch::Tensor axpy_cuda(torch::Tensor x, torch::Tensor y, double a) {
  auto out = torch::empty_like(x);
  int64_t n = x.numel();
  int threads = 256;
  int blocks = (int)((n + threads - 1) / threads);
  axpy_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), (float)a, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
