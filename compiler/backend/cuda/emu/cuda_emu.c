/* cuda_emu.c: fills the CudaApi table with the emulator's calls (cuda-emu): the driver,
 * NVRTC and cuBLAS, all on the CPU. */
#include <string.h>

#include "emu.h"

void cuda_api_open_emu(CudaApi *api) {
  memset(api, 0, sizeof *api);
  api->emulated = true;
  api->emu_detail = emu_detail;
  api->emu_close = emu_shutdown;
#define EMU_FILL(name) api->name = emu_##name;
  CUDA_DRIVER_CALLS(EMU_FILL)
  CUDA_NVRTC_CALLS(EMU_FILL)
  CUDA_CUBLAS_CALLS(EMU_FILL)
#undef EMU_FILL
}
