#include <cstdint>
#include <cuda_runtime.h>
__global__ void axpy_kernel(const float *x, const float *y, float *out, float a, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}
// out = a * x + y for n floats on the device, on `stream`; returns the launch's error.
int axpy_launch(const float *x, const float *y, float *out, float a, int64_t n, void *stream) {
  axpy_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(x, y, out, a, n);
  return (int)cudaGetLastError();
}
