//! Thread-count control for the CPU kernels (rayon underneath).
