.PHONY: help demo test lint format fixtures golden bench scanbench fuzz corpus schemas docs
help: ## list the targets
	@grep -E '^[a-z]+:.*## ' Makefile | sed 's/:.*## /\t/'
demo: ## install into .venv and run postmortem on the bundled sample dump
	sh dev/demo.sh
test: ## install everything the tests need (cuda-gdb included) and run them
	sh dev/test.sh
lint: ## ruff format --check, ruff check, mypy --strict
	sh dev/lint.sh
format: ## reformat the tree with ruff
	.venv/bin/ruff format . && .venv/bin/ruff check --fix .
fixtures: ## recompile the fixture cubins, rebuild the fixture and foreign dumps, record nvdisasm's and cuda-gdb's transcripts of them
	.venv/bin/python fixtures/builder/build_cubins.py
	.venv/bin/python fixtures/builder/build_dumps.py
	.venv/bin/python fixtures/builder/foreign.py
	.venv/bin/python fixtures/builder/record_nvdisasm.py
	.venv/bin/python fixtures/builder/record_operands.py
	.venv/bin/python fixtures/builder/record_transcripts.py
scanbench: ## scan of 1,000 generated dumps: -j1 vs -j2, cold vs warm cache, with and without the disassembly store
	.venv/bin/python bench/bench_scan.py
golden: ## regenerate the golden reports in tests/golden (review the diff)
	.venv/bin/python -m tests.golden
bench: scanbench ## reader on a 4 GiB, 100,000-lane dump vs a small one; one kernel vs a whole 500-kernel cubin; forensics of 32,000 faulting lanes; hangs of a whole H100
	.venv/bin/python bench/bench_open.py && .venv/bin/python bench/bench_localize.py && .venv/bin/python bench/bench_gdb.py && .venv/bin/python bench/bench_forensics.py && .venv/bin/python bench/bench_hang.py
fuzz: ## fuzz reader, analysis and reports with 100,000 structure-aware mutants of the fixture dumps (N=, SEED=, JOBS=), then the host-log parsers and the settings with 100,000 more; exit 1 on a crash, slow or memory outcome
	.venv/bin/python -m tests.fuzz.campaign -n $(or $(N),100000) --seed $(or $(SEED),1) $(if $(JOBS),-j $(JOBS))
	.venv/bin/python -m tests.fuzz.text_campaign -n $(or $(N),100000) --seed $(or $(SEED),1)
corpus: ## fetch the pinned production-kernel wheels (hash-checked, cached outside the tree), extract their sm_90 cubins, rewrite fixtures/corpus (TRITON_PYTHON= recompiles the Triton kernel)
	.venv/bin/python fixtures/builder/fetch_corpus.py $(if $(TRITON_PYTHON),--triton-python $(TRITON_PYTHON))
schemas: ## regenerate the shipped JSON Schemas from dev/schemas (one source per definition; review the diff)
	.venv/bin/python -m dev.schemas
docs: ## build the manual (docs/) as a site in site/, strictly: a broken link fails
	.venv/bin/python -m mkdocs build --strict
