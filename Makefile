.PHONY: setup test main bench lint bench-venv docs

setup:
	bash scripts/setup.sh

test:
	bash scripts/test.sh $(ARGS)

main:
	bash scripts/main.sh

bench: setup
	.venv/bin/python benchmarks/run.py $(ARGS)

lint: setup
	.venv/bin/ruff check $(wildcard rbdata tests benchmarks examples)

bench-venv:
	bash scripts/bench_venv.sh

docs:
	bash scripts/docs.sh
