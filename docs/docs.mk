# docs/docs.mk: the man page and documents installed with PPS.
dist_man_MANS += docs/ppsc.1
dist_doc_DATA += docs/language.md docs/json.md docs/runtime.md docs/synth.md docs/training.md docs/internals.md
