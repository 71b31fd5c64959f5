"""The networks: the frozen base GPT, the bidirectional blocks, GistNet, LensNet, rotary positions, losses."""
