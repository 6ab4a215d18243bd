"""Adapters for real serving engines (SGLang, transformers, vLLM), loaded as they ship.

`sources` finds an engine's tree (`ENGINE` installed, `ENGINE@SOURCE`: a wheel, a directory, a
checkout or a released version fetched into a cache); `loading` runs one of its files with
stand-ins for the infrastructure it imports; `engines` lists the built-in engines and gives
their planners. No code of an engine is copied into this package.
"""
