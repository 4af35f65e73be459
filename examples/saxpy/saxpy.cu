// saxpy: y = a*x + y, on the GPU when compiled by nvcc, on the CPU when compiled
// as C++ (g++ -x c++). Checks the result against a double-precision CPU reference.
//
// usage: saxpy [N [DUMP_FILE [TOLERANCE]]]
//   N          number of elements (default 2^20)
//   DUMP_FILE  write the resulting y as raw little-endian float32 ("-": none)
//   TOLERANCE  largest allowed |y - ref| / max(1, |ref|) (default 1e-6)
// Exit status: 0 when within tolerance, 1 when not, 2 on a CUDA error.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static const float A = 2.0f;

// Inputs are a function of the index, so any other program can recompute them.
static float x_at(long i) { return (float)(i % 1000) * 0.001f; }
static float y_at(long i) { return (float)(i % 777) * 0.5f - 100.0f; }

#ifdef __CUDACC__
#include <cuda_runtime.h>

__global__ void saxpy_kernel(long n, float a, const float *x, float *y) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

#define CHECK(call)                                                                  \
  do {                                                                               \
    cudaError_t err_ = (call);                                                       \
    if (err_ != cudaSuccess) {                                                       \
      fprintf(stderr, "saxpy: %s: %s\n", #call, cudaGetErrorString(err_));          \
      return 2;                                                                      \
    }                                                                                \
  } while (0)

static int run(long n, float a, const std::vector<float> &x, std::vector<float> &y) {
  int device = 0, runtime = 0, driver = 0;
  cudaDeviceProp prop;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaGetDeviceProperties(&prop, device));
  CHECK(cudaRuntimeGetVersion(&runtime));
  CHECK(cudaDriverGetVersion(&driver));
  printf("mode: cuda\ndevice: %s (sm_%d%d)\ncuda runtime: %d, driver API: %d\n", prop.name, prop.major,
         prop.minor, runtime, driver);
  size_t bytes = (size_t)n * sizeof(float);
  float *dx = nullptr, *dy = nullptr;
  CHECK(cudaMalloc(&dx, bytes));
  CHECK(cudaMalloc(&dy, bytes));
  CHECK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice));
  const int threads = 256;
  saxpy_kernel<<<(unsigned)((n + threads - 1) / threads), threads>>>(n, a, dx, dy);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(y.data(), dy, bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  return 0;
}
#else
static int run(long n, float a, const std::vector<float> &x, std::vector<float> &y) {
  printf("mode: cpu\n");
  for (long i = 0; i < n; i++) y[i] = a * x[i] + y[i];
  return 0;
}
#endif

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : (1L << 20);
  const char *dump = argc > 2 && strcmp(argv[2], "-") != 0 ? argv[2] : nullptr;
  double tolerance = argc > 3 ? atof(argv[3]) : 1e-6;
  if (n <= 0) {
    fprintf(stderr, "saxpy: N must be positive\n");
    return 2;
  }
  std::vector<float> x(n), y(n);
  for (long i = 0; i < n; i++) {
    x[i] = x_at(i);
    y[i] = y_at(i);
  }
  int rc = run(n, A, x, y);
  if (rc != 0) return rc;
  double max_error = 0.0, checksum = 0.0;
  for (long i = 0; i < n; i++) {
    double ref = (double)A * (double)x_at(i) + (double)y_at(i);
    double err = std::fabs((double)y[i] - ref) / std::fmax(1.0, std::fabs(ref));
    if (err > max_error) max_error = err;
    checksum += y[i];
  }
  printf("n: %ld\nchecksum: %.6f\nmax error: %.3e (tolerance %.1e)\n", n, checksum, max_error, tolerance);
  if (dump != nullptr) {
    FILE *f = fopen(dump, "wb");
    if (f == nullptr || fwrite(y.data(), sizeof(float), (size_t)n, f) != (size_t)n || fclose(f) != 0) {
      fprintf(stderr, "saxpy: cannot write %s\n", dump);
      return 2;
    }
  }
  if (!(max_error <= tolerance)) {
    printf("FAIL\n");
    return 1;
  }
  printf("PASS\n");
  return 0;
}
