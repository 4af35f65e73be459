// Sum 2^24 ones on the GPU with a block reduction and atomics; the exact answer is 16777216.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void sum(const float *x, int n, float *total) {
    __shared__ float part[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    part[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(total, part[0]);
}

int main() {
    const int n = 1 << 24;
    float *x = nullptr, *total = nullptr;
    cudaMalloc(&x, n * sizeof(float));
    cudaMalloc(&total, sizeof(float));
    float *h = new float[n];
    for (int i = 0; i < n; ++i) h[i] = 1.0f;
    cudaMemcpy(x, h, n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemset(total, 0, sizeof(float));
    sum<<<n / 256, 256>>>(x, n, total);
    float result = 0;
    if (cudaMemcpy(&result, total, sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) { std::printf("CUDA error\n"); return 2; }
    std::printf("sum of %d ones = %.0f: %s\n", n, result, result == (float)n ? "PASS" : "FAIL");
    return result == (float)n ? 0 : 1;
}
