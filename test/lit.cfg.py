# -*- Python -*-
# lit configuration of the AMP-MLIR test suite.

import os

import lit.formats
from lit.llvm import llvm_config

config.name = "AMP-MLIR"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.amp_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Inputs"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%shlibext", config.llvm_shlib_ext))
config.substitutions.append(("%amp_src_root", config.amp_src_root))
config.substitutions.append(("%amp_tools_dir", config.amp_tools_dir))
config.substitutions.append(("%python", config.python_executable))

# The sanitizers' options (scripts/sanitized.sh sets them for the ASan build).
llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP", "ASAN_OPTIONS",
                                     "UBSAN_OPTIONS", "LSAN_OPTIONS"])
llvm_config.use_default_substitutions()

# Our tools first, then FileCheck / not / count from LLVM.
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.amp_tools_dir, append_path=True)
tool_dirs = [config.amp_tools_dir, config.llvm_tools_dir]
tools = ["amp-opt"]
for extra in ["amp-translate", "amp-run", "amp-compile"]:
    if os.path.exists(os.path.join(config.amp_tools_dir, extra)):
        tools.append(extra)
        config.available_features.add(extra)
llvm_config.add_tool_substitutions(tools, tool_dirs)
# Built with the CUDA toolkit: amp-compile --device cuda, amp-run --device cuda.
if getattr(config, "amp_have_cuda", "").upper() in ("ON", "1", "TRUE"):
    config.available_features.add("cuda-toolkit")
