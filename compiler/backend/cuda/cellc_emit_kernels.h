/* cellc_emit_kernels.h: the two kernels an emitted P.cu adds to the CUDA back end's (cuda_emit.c
 * embeds this text after them): between the C API's layouts (a complex tensor interleaved, a
 * trailing dimension of 2) and the plan's arrays (a complex value as two real planes). */

/* re[i] = src[i * stride], im[i] = src[i * stride + 1] for i < n (zeros when src is NULL); a NULL
 * destination is skipped. stride 1: a real tensor (im NULL). */
extern "C" __global__ void cellc_emit_unpack(long long n, const float *src, int stride, float *re, float *im) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    if (re) re[i] = src ? src[i * stride] : 0.0f;
    if (im) im[i] = src ? src[i * stride + 1] : 0.0f;
  }
}

/* dst[i * stride] = re[i] (kre when re is NULL), and with stride 2 dst[i * stride + 1] = im[i]
 * (kim when im is NULL), for i < n. */
extern "C" __global__ void cellc_emit_pack(long long n, const float *re, float kre, const float *im, float kim, int stride,
                                           float *dst) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    dst[i * stride] = re ? re[i] : kre;
    if (stride == 2) dst[i * stride + 1] = im ? im[i] : kim;
  }
}
