"""What a function's peak is made of, in the model's terms: each block alive
then is a parameter, buffer, gradient, optimizer state, an activation saved
for backward, a temporary, an input, a workspace or another thread's
(``names``).  ``tagging`` tells the tracer which blocks are which while a
profiled call runs; ``breakdown`` turns its figures into ``record["peak"]``'s
kinds."""
