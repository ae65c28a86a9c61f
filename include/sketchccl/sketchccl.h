/* SketchCCL public API: what a program may ask of the library beyond nccl.h. Plain C. */
#ifndef SKETCHCCL_SKETCHCCL_H_
#define SKETCHCCL_SKETCHCCL_H_

#ifdef __cplusplus
extern "C" {
#endif

#define SKETCHCCL_EXPORT __attribute__((visibility("default")))

/* Version as major*10000 + minor*100 + patch. */
SKETCHCCL_EXPORT int sketchcclGetVersion(void);
/* Version as "major.minor.patch". */
SKETCHCCL_EXPORT const char* sketchcclGetVersionString(void);

#ifdef __cplusplus
}
#endif

#endif /* SKETCHCCL_SKETCHCCL_H_ */
