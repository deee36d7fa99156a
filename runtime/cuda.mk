# runtime/cuda.mk: the CUDA backend and the NCCL transport (built when configure finds CUDA).
