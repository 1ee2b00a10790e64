"""The testbed's studies: the method comparison (`compare`, its config `compare_config`, its results file `results`
and `report`), WiSE-FT interpolation (`interpolate`, `wise_curves`), the RL stage (`rl_stage`) and the testbed's
prompt sets for `anchorft analyze` (`analysis`). The testbed itself (model, skills, pretraining, evaluation) is the
library's `anchorft.toy`."""
