from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(name="axpy_ext", version="1.0",
      ext_modules=[CUDAExtension("axpy_ext", ["axpy.cpp", "axpy_kernel.cu"])],
      cmdclass={"build_ext": BuildExtension})
