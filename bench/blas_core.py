"""The OpenBLAS core this Python process runs (the one PyTorch's products call), for the bench's
JSON lines: openblas_get_corename of the libopenblas already loaded; "" when there is none."""
import ctypes


def openblas_core():
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return ""
