"""CPU emulator of emitted CUDA (in progress)."""
