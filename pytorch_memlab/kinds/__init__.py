"""What a function's peak is made of, in the model's terms: each block alive
then is a parameter, buffer, gradient, optimizer state, an activation saved
for backward, a temporary, an input, a workspace or another thread's
(``names``), and a block made during the call was made by some module
(``modules``; in the backward pass, ``backward``).  ``tagging`` tells the
tracer which blocks are which, and which module each thread runs, while a
profiled call runs; ``breakdown`` turns its figures into
``record["peak"]``'s kinds and modules."""
