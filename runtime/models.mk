# runtime/models.mk: models (gpt) and the kernels every backend implements.
