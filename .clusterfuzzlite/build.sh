#!/bin/bash -eu
# ClusterFuzzLite / OSS-Fuzz build script: package each atheris harness as a fuzz target.
# The harnesses read KIMI_FUZZ_* variables at run time (see kimi_oracle/harnesses.py); without
# them they fuzz the `reference` candidate under the k3 profile and raise on any finding, so
# ClusterFuzzLite files the input like any crash. Point them at your kernel by baking, e.g.,
# `ENV KIMI_FUZZ_CANDIDATE=my_kernels.preprocess:run` into the Dockerfile.
cd "$SRC/kimi-oracle"
python3 -m pip install --no-cache-dir '.[fuzz]'

for fuzzer in fuzz/*_fuzzer.py; do
  name=$(basename "$fuzzer" .py)
  compile_python_fuzzer "$fuzzer" \
    --hidden-import=kimi_oracle.fuzzers.harnesses --hidden-import=kimi_oracle.fuzzers.fuzzing \
    --hidden-import=kimi_oracle.pipelines.reference --hidden-import=kimi_oracle.oracle.candidates \
    --collect-submodules=PIL
  # Seed corpus, dictionary and libFuzzer options next to the target, as the engine expects.
  corpus_dir="fuzz/corpus/${name%_fuzzer}"
  if [ -d "$corpus_dir" ]; then
    (cd "$corpus_dir" && zip -q -r "$OUT/${name}_seed_corpus.zip" .)
  fi
  [ -f "fuzz/${name}.options" ] && cp "fuzz/${name}.options" "$OUT/"
done
cp fuzz/png_jpeg.dict "$OUT/"
