"""Studies written over the library: the testbed's method comparison and what builds on it (report, WiSE-FT
interpolation, RL stage, the analysis inputs), and the one grid runner they share (`grid`)."""
