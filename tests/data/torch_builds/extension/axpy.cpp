#include <torch/extension.h>
torch::Tensor axpy_cuda(torch::Tensor x, torch::Tensor y, double a);
torch::Tensor axpy(torch::Tensor x, torch::Tensor y, double a) {
  TORCH_CHECK(x.is_cuda() && y.is_cuda(), "x and y must be CUDA tensors");
  TORCH_CHECK(x.sizes() == y.sizes() && x.scalar_type() == torch::kFloat && y.scalar_type() == torch::kFloat, "float32 tensors of one shape");
  return axpy_cuda(x.contiguous(), y.contiguous(), a);
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("axpy", &axpy, "a * x + y on the GPU"); }
