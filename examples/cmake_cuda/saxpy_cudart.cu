// y = a*x + y on the GPU, checked element by element against the CPU. Exit 0: PASS, 1: wrong, 2: no GPU.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

int main(int argc, char **argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 1 << 20;
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: %s\n", cudaGetErrorString(err));
    return 2;
  }
  std::vector<float> x(n), y(n), ref(n);
  for (int i = 0; i < n; ++i) { x[i] = 0.5f * (i % 97); y[i] = 1.0f + (i % 13); ref[i] = 3.0f * x[i] + y[i]; }
  float *dx, *dy;
  cudaMalloc(&dx, n * sizeof(float));
  cudaMalloc(&dy, n * sizeof(float));
  cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  saxpy<<<(n + 255) / 256, 256>>>(n, 3.0f, dx, dy);
  err = cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) { std::printf("CUDA error: %s\n", cudaGetErrorString(err)); return 1; }
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += std::fabs(y[i] - ref[i]) > 1e-5f * std::fabs(ref[i]) + 1e-6f;
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("saxpy-cudart on %s (sm_%d%d): n=%d mismatches=%d %s\n", prop.name, prop.major, prop.minor, n, bad,
              bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
}
