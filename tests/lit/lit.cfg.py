# lit configuration for zplan's compiler tests. Each test file is also registered as its own ctest case
# (tests/CMakeLists.txt), which passes the site config through --param zplan_site_config.
import os
import lit.formats

config.name = "zplan"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py.in"]

site = lit_config.params.get("zplan_site_config")
if site and not getattr(config, "zplan_site_loaded", False):
    lit_config.load_config(config, site)

config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.zplan_binary_dir, "tests", "lit")

# Our tools first, then LLVM's FileCheck, not, count, split-file.
config.environment["PATH"] = os.pathsep.join(
    [config.zplan_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])])
config.substitutions.append(("%python", config.python_executable))
config.substitutions.append(("%models", config.zplan_models_dir))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
