# `make demo` and `make test` create .venv when missing, then run.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORE := $(VENV)/.installed-core
DEV := $(VENV)/.installed-dev

.PHONY: demo docs docs-tables drift test test-wheel test-dist test-slurm test-ray test-long test-all lint format bench mutants clean

# CI's budgets on an idle 2-core CPU machine (.ci/run: `make test`, then docs and test-dist beside test-ray, test-wheel and
# test-slurm): under 10 min in all, installs included, on most days (538-588 s); this kind of machine's speed varies
# by about a third from day to day, and on a slow day it took 715-771 s (docs/testing.md has the runs). A target is stopped at about twice
# its slowest time seen (TIMEOUT), so a hang fails in minutes, not at CI's limit, and a slow day does not fail CI.
#   test        4-5 min installs (about 60 s), the default suite (slow tests deselected), 2 pytest-xdist workers
#   test-wheel  1 min   the wheel outside the checkout
#   test-dist   4-6 min the distributed matrix, the launcher, every recipe's dry run, the FSDP2 shard-aware gradient,
#                       uneven row partitions, a study on 1 and 2 workers (slow-marked tests)
#   test-slurm  1 min   the SLURM templates on a simulated 2-node allocation, the 2-process signal test (slow)
#   test-ray    3-5 min the studies on a 2-node Ray cluster started on this machine, the address checks on a
#                       token-authenticated head and a local instance (Ray installed first; mostly waiting on Ray,
#                       slowed by test-dist beside it)
TIMEOUT := timeout --signal=TERM --kill-after=30

# the demo needs the package and peft (its LoRA + anchor run); the tests add pytest, ruff and lm-eval (35 s more to
# install here)
$(CORE): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[peft]'
	touch $(CORE)

# DS_BUILD_OPS=0: DeepSpeed without compiled ops (about 15 s here; its CPU accelerator runs the distributed tests)
$(DEV): $(CORE)
	DS_BUILD_OPS=0 $(BIN)/pip install -q -e '.[dev]'
	touch $(DEV)

demo: $(CORE)
	$(BIN)/python -m anchorft.demo --out runs/demo

# the docs' tables (README.md, docs/*.md: <!-- table: NAME --> blocks) and configs/toy/verdict-summary.json,
# rewritten from records/*.json (anchorft.studies.records); tests/studies/test_records.py fails while they differ
docs-tables: $(CORE)
	$(BIN)/python -m anchorft.studies.records tables

# the documentation site (mkdocs.yml) into site/: MkDocs with Material and mkdocstrings (the API read from the source,
# nothing imported), strict: a warning, a broken link or a missing anchor fails the build (docs/building-docs.md;
# the extra installs in about 7 s, the build takes about 5 s here)
DOCS := $(VENV)/.installed-docs
$(DOCS): $(CORE)
	$(BIN)/pip install -q -e '.[docs]'
	touch $(DOCS)

docs: $(DOCS)
	NO_MKDOCS_2_WARNING=1 $(TIMEOUT) 120 $(BIN)/mkdocs build --strict --quiet

# the drift alarm alone (it is in the default suite too): each record's replay (the first pretraining and fine-tuning
# steps, a short W2S seed, the verdict re-scored from its grades) on the code of now against the one stored
# (anchorft.studies.drift; 18 s measured)
drift: $(DEV)
	$(TIMEOUT) 120 $(BIN)/python -m pytest -q tests/studies/test_drift.py

# two pytest-xdist workers: the suite's many small processes and file writes leave a core idle when run one by one
test: $(DEV)
	$(TIMEOUT) 900 $(BIN)/python -m pytest -q -n 2

# the built wheel, unpacked outside the checkout: presets and model configs ship inside it (.ci/test-wheel)
test-wheel: $(DEV)
	$(TIMEOUT) 120 .ci/test-wheel $(BIN)/python

# every method under DDP, ZeRO-2, ZeRO-3 and FSDP2 (2 gloo processes on CPU; 40 cells), the anchor's penalty and
# gradient under ZeRO-2/3, the RL anchor under DeepSpeed, benchmarks/gpu_check.py's launches on the CPU and every
# recipe's dry run: slow-marked tests, run by .ci/run after `make test` (one test at a time: with test-ray beside it,
# two pytest-xdist workers here oversubscribe the 2 cores: 397 s, and test-ray's cluster ran out of its time)
DIST_TESTS := tests/rpsft/test_distributed_matrix.py tests/rpsft/test_rl_deepspeed.py \
	tests/benchmarks/test_gpu_check.py::test_gpu_check_launches_anchorft_train_on_cpu \
	tests/rpsft/test_recipes.py::test_dry_run \
	tests/rpsft/test_trainer_multiprocess.py::test_fsdp2_shard_aware_penalty_grad \
	tests/rpsft/test_sharding_uneven_rows.py \
	tests/studies/testbed/test_compare.py::test_workers_give_the_same_results
test-dist: $(DEV)
	$(TIMEOUT) 720 $(BIN)/python -m pytest -q -m slow $(DIST_TESTS)

# the SLURM templates (configs/slurm) on a 2-node allocation simulated on this machine: the template's
# own two `accelerate launch` lines (gloo, one CPU process a node), a TERM to the batch shell forwarded, the job
# requeued and resumed to a model that loads (slow-marked; 29 s measured here)
test-slurm: $(DEV)
	$(TIMEOUT) 240 $(BIN)/python -m pytest -q -m slow tests/test_slurm.py tests/rpsft/test_train_signals.py

# a Ray head and worker node as processes of this machine (1 CPU each, own temp folders, stopped by their process
# ids): a W2S sweep, a smoke comparison and an evaluation suite equal to local processes; a worker node killed
# mid-study (its cell recorded as lost, the others run), the study resumed
RAY := $(VENV)/.installed-ray
$(RAY): $(DEV)
	$(BIN)/pip install -q -e '.[ray]'
	touch $(RAY)

# with Ray installed: the cluster tests (slow) and the tests of the address checks that skip without Ray
RAY_TESTS := tests/studies/test_grid_ray.py tests/studies/test_ray_probe.py tests/commands/test_executor_flags.py
test-ray: $(RAY)
	$(TIMEOUT) 600 $(BIN)/python -m pytest -q -m '' $(RAY_TESTS)

# the slow tests that no CI target runs (about 8 min here: the W2S long-budget checks, the estimate against held
# bytes on two ranks, the 2-process trainer equalities, the RL runs); docs/testing.md lists them
LONG_TESTS := tests/rpsft/test_estimate_stages.py tests/rpsft/test_rl.py tests/rpsft/test_trainer_multiprocess.py \
	tests/studies/test_grid.py tests/w2s
test-long: $(DEV)
	$(BIN)/python -m pytest -q -m slow $(LONG_TESTS) --deselect \
		tests/rpsft/test_trainer_multiprocess.py::test_fsdp2_shard_aware_penalty_grad

test-all: $(DEV)
	$(BIN)/python -m pytest -q -m ''

lint: $(DEV)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

format: $(DEV)
	$(BIN)/ruff check --fix src tests benchmarks
	$(BIN)/ruff format src tests benchmarks

bench: $(DEV)
	for f in benchmarks/*.py; do $(BIN)/python $$f || exit 1; done

# Mutation testing of the core functions (docs/testing.md; not part of CI): mutmut 3, configured in
# pyproject.toml ([tool.mutmut]: the files and their test files); MUTANTS names the functions, one glob each
# (mutmut's names: module.x_function__mutmut_N, module.xǁClassǁmethod__mutmut_N; `?` stands for ǁ).
# Each run starts from a clean mutants/ folder, one test process at a time (MUTANTS_CHILDREN), at low priority.
# One module at a time: make mutants MUTANTS='anchorft.subspace.*'; the slower rest: MUTANTS='$(MUTANTS_MORE)'.
MUTANTS_CHILDREN ?= 1
MUTANTS ?= \
	'anchorft.subspace.*' \
	'anchorft.rpsft.losses.*' \
	'anchorft.eval.metrics.*' \
	'anchorft.eval.answers.*' \
	'anchorft.eval.report.x_main_table*' 'anchorft.eval.report.x_table_markdown*' 'anchorft.eval.report.x__mean*' \
	'anchorft.eval.report.x__pct*' 'anchorft.eval.runner.x__kept*' 'anchorft.eval.protocol.x?SuiteSettings?_new_tokens*' \
	'anchorft.eval.protocol.x?SuiteSettings?generation_key*' \
	'anchorft.runs.*' \
	'anchorft.rpsft.anchor_plan.*' \
	'anchorft.rpsft.anchor.x?SubspaceAnchor?penalty_terms*' 'anchorft.rpsft.anchor.x?SubspaceAnchor?_summary*' \
	'anchorft.rpsft.anchor.x?SubspaceAnchor?check_model*' 'anchorft.rpsft.anchor.x?SubspaceAnchor?_terms*' \
	'anchorft.rpsft.anchor.x?SubspaceAnchor?_add_penalty_grad*' 'anchorft.rpsft.anchor.x?SubspaceAnchor?_drift*' \
	'anchorft.rpsft.trainer.x?RPSFTTrainer?_anchor_due*' 'anchorft.rpsft.trainer.x?AnchorSteps?training_step*' \
	'anchorft.rpsft.trainer.x?RPSFTTrainer?_anchor_scale_value*' \
	'anchorft.w2s.fused.x?ReducedStepper?step*' 'anchorft.w2s.fused.x?ReducedStepper?losses*' \
	'anchorft.w2s.fused.x?ReducedStepper?weights*' 'anchorft.w2s.fused.x?ReducedStepper?reset*' \
	'anchorft.w2s.fused.x?ReducedStepper?prepare_labels*' \
	'anchorft.w2s.dynamics.x_dense_step*' 'anchorft.w2s.dynamics.x_reduced_step*' \
	'anchorft.w2s.dynamics.x__sphere_factors*' 'anchorft.w2s.dynamics.x__coefficients*' \
	'anchorft.w2s.dynamics.x__residual*' 'anchorft.w2s.dynamics.x_renormalise_reduced*' \
	'anchorft.w2s.dynamics.x_step_scale*' 'anchorft.w2s.dynamics.x_schedule_factor*'
# the slower rest (each runs tiny training)
MUTANTS_MORE = \
	'anchorft.rpsft.anchor.x?SubspaceAnchor?_blocks*' 'anchorft.rpsft.anchor_store.x_weights_fingerprint*' \
	'anchorft.rpsft.trainer.x?RPSFTTrainer?compute_loss*' 'anchorft.rpsft.trainer.x?AnchorSteps?_add_anchor_term*' \
	'anchorft.rpsft.trainer.x?AnchorSteps?log*'

# the newest modules: the verdict's statistics, the study record, the agreed stop, the adapters (the grid runner and
# the sharded anchor reach their paths in spawned or launched processes: docs/testing.md says how far mutmut sees)
MUTANTS_NEW = \
	'anchorft.eval.intervals.*' 'anchorft.studies.testbed.record.*' 'anchorft.stop.*' \
	'anchorft.studies.testbed.verdict.*' 'anchorft.rpsft.adapters.*' 'anchorft.studies.grid.*' \
	'anchorft.rpsft.sharding.*'

# mutmut in its own session: a mutant of a pool's shutdown can leave spawned workers alive after mutmut ends; the
# session's leftovers are killed when it exits (they had held ~10 GB until found)
mutants: $(DEV)
	rm -rf mutants
	@date -u +'start %FT%TZ'
	OMP_NUM_THREADS=1 setsid --wait sh -c 'trap "pkill -KILL -s \$$$$ -f [s]pawn_main || true" EXIT; \
		nice -n 15 $(BIN)/mutmut run --max-children $(MUTANTS_CHILDREN) $(MUTANTS)' 
	@date -u +'end %FT%TZ'
	$(BIN)/python benchmarks/mutants_summary.py $(MUTANTS)

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis mutants site
