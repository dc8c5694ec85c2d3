"""The JAX programs the book compiles: the HLO fixtures, declared once in
`registry` (standard library; the cost model's prediction rule and a numpy
reference with each) and built in `fixtures`, and the small decoder of
`model`, trained on every mesh. The tools that read what XLA makes of them
(capture, inventory, prediction, DOT) are in shardbook.hlo."""
