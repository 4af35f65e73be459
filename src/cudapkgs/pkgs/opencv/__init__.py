"""OpenCV 4 with opencv_contrib, built from source with CMake (optionally CUDA); docs/opencv.md."""

from .package import opencv4

__all__ = ["opencv4"]
