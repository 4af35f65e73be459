// cublasSgemm (C = A*B) and cublasSaxpy checked against the CPU. Exit 0: PASS, 1: wrong, 2: no GPU.
#include <cmath>
#include <cstdio>
#include <vector>
#include <cublas_v2.h>
#include <cuda_runtime.h>

int main() {
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: %s (cuBLAS %d linked)\n", cudaGetErrorString(err), CUBLAS_VERSION);
    return 2;
  }
  const int n = 256;
  std::vector<float> a(n * n), b(n * n), c(n * n, 0.0f), ref(n * n, 0.0f);
  for (int i = 0; i < n * n; ++i) { a[i] = (i % 7) * 0.25f; b[i] = (i % 5) * 0.5f - 1.0f; }
  for (int j = 0; j < n; ++j)      // column-major, as cuBLAS
    for (int k = 0; k < n; ++k)
      for (int i = 0; i < n; ++i) ref[i + j * n] += a[i + k * n] * b[k + j * n];
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) { std::printf("cublasCreate failed\n"); return 1; }
  float *da, *db, *dc;
  cudaMalloc(&da, n * n * sizeof(float));
  cudaMalloc(&db, n * n * sizeof(float));
  cudaMalloc(&dc, n * n * sizeof(float));
  cudaMemcpy(da, a.data(), n * n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), n * n * sizeof(float), cudaMemcpyHostToDevice);
  const float one = 1.0f, zero = 0.0f, two = 2.0f;
  cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n);
  cublasSaxpy(h, n * n, &two, da, 1, dc, 1);  // C += 2*A
  cudaMemcpy(c.data(), dc, n * n * sizeof(float), cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < n * n; ++i) bad += std::fabs(c[i] - (ref[i] + 2 * a[i])) > 1e-3f * (1 + std::fabs(ref[i]));
  int version = 0;
  cublasGetVersion(h, &version);
  cublasDestroy(h);
  std::printf("cublas-check: cuBLAS %d, sgemm %dx%d + saxpy, mismatches=%d %s\n", version, n, n, bad,
              bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
}
