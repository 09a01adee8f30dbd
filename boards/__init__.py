"""Board targets, bitstream builds, and resource and timing reports."""
