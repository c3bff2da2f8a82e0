/* test_cuda_abi.c - the CUDA driver structures runtime/cuda_driver.h mirrors (cuda.h is
 * never included by the library, which opens libcuda with dlopen) against cuda.h itself,
 * where the toolkit is installed: a wrong offset would hand cuLaunchKernelEx garbage. */
#include <cuda.h>
#include <stddef.h>
#include <stdio.h>

#include "runtime/cuda_driver.h"

static int failed;
#define SAME(what, a, b)                                                                                     \
  do {                                                                                                       \
    if ((size_t)(a) != (size_t)(b)) {                                                                        \
      printf("FAIL %s: %zu here, %zu in cuda.h\n", what, (size_t)(a), (size_t)(b));                        \
      failed++;                                                                                              \
    }                                                                                                        \
  } while (0)

int main(void) {
  SAME("attribute size", sizeof(da__cu_launch_attribute), sizeof(CUlaunchAttribute));
  SAME("attribute id", offsetof(da__cu_launch_attribute, id), offsetof(CUlaunchAttribute, id));
  SAME("attribute value", offsetof(da__cu_launch_attribute, value), offsetof(CUlaunchAttribute, value));
  SAME("attribute value size", sizeof(((da__cu_launch_attribute *)0)->value), sizeof(CUlaunchAttributeValue));
  SAME("attribute alignment", _Alignof(da__cu_launch_attribute), _Alignof(CUlaunchAttribute));
  SAME("serialization flag", offsetof(da__cu_launch_attribute, value.programmatic_stream_serialization_allowed),
       offsetof(CUlaunchAttribute, value.programmaticStreamSerializationAllowed));
  SAME("attribute id value", DA__CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
       CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
  SAME("config size", sizeof(da__cu_launch_config), sizeof(CUlaunchConfig));
  SAME("config grid", offsetof(da__cu_launch_config, grid_x), offsetof(CUlaunchConfig, gridDimX));
  SAME("config block z", offsetof(da__cu_launch_config, block_z), offsetof(CUlaunchConfig, blockDimZ));
  SAME("config smem", offsetof(da__cu_launch_config, shared_mem_bytes), offsetof(CUlaunchConfig, sharedMemBytes));
  SAME("config stream", offsetof(da__cu_launch_config, stream), offsetof(CUlaunchConfig, hStream));
  SAME("config attrs", offsetof(da__cu_launch_config, attrs), offsetof(CUlaunchConfig, attrs));
  SAME("config num_attrs", offsetof(da__cu_launch_config, num_attrs), offsetof(CUlaunchConfig, numAttrs));
  SAME("tensor map uint16", DA__TMAP_UINT16, CU_TENSOR_MAP_DATA_TYPE_UINT16);
  SAME("tensor map swizzle 128B", DA__TMAP_SWIZZLE_128B, CU_TENSOR_MAP_SWIZZLE_128B);
  SAME("tensor map L2 128B", DA__TMAP_L2_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
  SAME("pool props size", sizeof(da__cu_mempool_props), sizeof(CUmemPoolProps));
  SAME("pool props location", offsetof(da__cu_mempool_props, location_type), offsetof(CUmemPoolProps, location));
  SAME("pool props location id", offsetof(da__cu_mempool_props, location_id), offsetof(CUmemPoolProps, location.id));
  SAME("pool props win32", offsetof(da__cu_mempool_props, win32_security_attributes),
       offsetof(CUmemPoolProps, win32SecurityAttributes));
  SAME("pool props max size", offsetof(da__cu_mempool_props, max_size), offsetof(CUmemPoolProps, maxSize));
  SAME("pool props usage", offsetof(da__cu_mempool_props, usage), offsetof(CUmemPoolProps, usage));
  SAME("pinned", DA__CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_ALLOCATION_TYPE_PINNED);
  SAME("device location", DA__CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_DEVICE);
  SAME("tensor map size", sizeof(da__cuda_tmap), sizeof(CUtensorMap));
  SAME("tensor map alignment", _Alignof(da__cuda_tmap), _Alignof(CUtensorMap));
  printf("%s\n", failed ? "launch structures differ from cuda.h" : "launch structures match cuda.h");
  return failed != 0;
}
