// Which GPU a worker was given: its name, PCI bus id and capability; a kernel must run on it.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void fill(int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * 3;
}

int main() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) { std::printf("no CUDA device\n"); return 2; }
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    char bus[32];
    cudaDeviceGetPCIBusId(bus, sizeof bus, 0);
    const int n = 1 << 20;
    int *d = nullptr;
    cudaMalloc(&d, n * sizeof(int));
    fill<<<(n + 255) / 256, 256>>>(d, n);
    static int h[1 << 20];
    cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(d);
    for (int i = 0; i < n; ++i) if (h[i] != i * 3) { std::printf("wrong value at %d\n", i); return 1; }
    std::printf("visible devices: %d; device 0: %s, PCI %s, sm_%d%d: kernel OK\n", count, prop.name, bus, prop.major, prop.minor);
    return 0;
}
