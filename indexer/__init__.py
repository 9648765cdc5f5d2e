"""The indexing side: sources, chunker, embedders, store and the sync that wires them."""

import os

# numpy's OpenBLAS keeps a thread per core spinning after each call: ~145 ms of CPU in a 0.5 s
# query (another process's core, on a laptop its battery), while every matrix here is small
# (384 wide, a few thousand rows at most). One thread, unless the user's environment says otherwise.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
