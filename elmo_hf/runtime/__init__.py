"""How elmo-hf runs as processes on the CPU: ``parallelism.py`` (the one home of the thread and process policy:
cores, worker processes, their start method, torch threads) and ``process_tuning.py`` (what the ``elmo-hf`` command
sets in its own process: the garbage collector's thresholds, no collection while a command imports its libraries,
and glibc malloc's thresholds). Neither imports torch at import."""
