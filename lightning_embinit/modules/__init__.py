"""Plain-torch building blocks shared by every architecture: attention, blocks and stacks, the input
path s · E[ids] + P, output heads, non-embedding initialization and decoding. Nothing here imports Lightning."""
