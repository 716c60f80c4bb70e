"""The reporters: each renders what it is given (a profile, the ranks of a
torchrun, a MemReporter report) as text or HTML through one interface,
``base.Reporter``; ``base.reporter_for(format)`` picks a profile's.  None of
them imports torch or the compiled modules."""
