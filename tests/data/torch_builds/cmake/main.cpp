#include <torch/torch.h>
#include <c10/cuda/CUDAStream.h>
#include <cstdint>
#include <iostream>
int axpy_launch(const float *x, const float *y, float *out, float a, int64_t n, void *stream);
int main() {
  auto x = torch::arange(4, torch::kFloat);
  auto y = torch::ones({4});
  std::cout << "torch " << TORCH_VERSION << " cpu " << (2 * x + y).sum().item<float>() << "\n";
  if (!torch::cuda::is_available()) { std::cout << "no CUDA device\n"; return 2; }
  auto xd = x.cuda(), yd = y.cuda();
  auto out = torch::empty_like(xd);
  int err = axpy_launch(xd.data_ptr<float>(), yd.data_ptr<float>(), out.data_ptr<float>(), 2.0f, xd.numel(),
                        c10::cuda::getCurrentCUDAStream().stream());
  if (err != 0) { std::cout << "launch error " << err << "\n"; return 1; }
  auto host = out.cpu();
  std::cout << "cuda " << host.sum().item<float>() << "\n";
  return host.equal(2 * x + y) ? 0 : 1;
}
