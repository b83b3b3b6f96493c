"""Runs scripts/e2e-node.sh against fake_kubectl.py (a simulated node, device plugin and
scheduler) to prove its control flow: it passes on a healthy node, with and without
time-slicing, fails when the node never advertises the resource, when devicequery does not pass
and when the scheduler does not hold the extra pod back, and always removes what it created.
With --limits and an MPS config it passes when the limit holds (the probe passes, the pod beyond
its limit is refused with CUDA_ERROR_OUT_OF_MEMORY while the one under it runs on) and fails
where MPS does not hold the limit or the GPU is shared without limits.

Run: python -m unittest discover -s deploy/lint -p 'test_*.py'  (scripts/validate-manifests.sh does)
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

JOB = """apiVersion: batch/v1
kind: Job
metadata:
  name: devicequery
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: devicequery
          image: example/devicequery:test
          resources:
            limits:
              nvidia.com/gpu: 1
"""

PASS_LOG = "Device 0: \"Orin\"\n  CUDA Capability Major/Minor version number:    8.7\nResult = PASS"


class E2eNodeScriptTest(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())
        (self.tmp / "scripts").mkdir()
        shutil.copy(REPO / "scripts" / "e2e-node.sh", self.tmp / "scripts")
        (self.tmp / "deploy" / "devicequery").mkdir(parents=True)
        for path in (REPO / "deploy").glob("*.yaml"):
            shutil.copy(path, self.tmp / "deploy")
        shutil.copytree(REPO / "deploy" / "examples", self.tmp / "deploy" / "examples")
        (self.tmp / "deploy" / "devicequery" / "job.yaml").write_text(JOB)
        bin_dir = self.tmp / "bin"
        bin_dir.mkdir()
        kubectl = bin_dir / "kubectl"
        kubectl.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "fake_kubectl.py"}" "$@"\n')
        kubectl.chmod(0o755)
        self.state_file = self.tmp / "state.json"
        self.env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_KUBE_STATE=str(self.state_file),
                        E2E_POLL_SECONDS="0.2")
        self.env.pop("KUBECTL", None)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def run_script(self, *args, **state):
        initial = {"node": "orin-1", "gpus": 1, "component": "jetson", "register_delay": 0.5, "job_log": PASS_LOG,
                   "job_seconds": 0.5, "pods": [], "jobs": {}, "configmaps": {}}
        initial.update(state)
        self.state_file.write_text(json.dumps(initial))
        result = subprocess.run([str(self.tmp / "scripts" / "e2e-node.sh"), "--hold", "5", "--timeout", "10", *args],
                                env=self.env, capture_output=True, text=True, timeout=120, check=False)
        self.output = result.stdout + result.stderr
        self.final = json.loads(self.state_file.read_text())
        return result.returncode

    def assert_cleaned_up(self):
        self.assertEqual([p["name"] for p in self.final["pods"]], [], self.output)
        self.assertEqual(self.final["jobs"], {}, self.output)
        self.assertEqual(self.final["configmaps"], {}, self.output)
        self.assertNotIn("unsupported invocation", self.output)

    def test_one_gpu_second_pod_waits_for_the_first(self):
        self.assertEqual(self.run_script(), 0, self.output)
        self.assertIn("PASS node orin-1 advertises nvidia.com/gpu: 1", self.output)
        self.assertIn("Result = PASS", self.output)
        self.assertIn("PASS devicequery: Result = PASS", self.output)
        self.assertIn("PASS contention: 1 pod(s) each with 1 nvidia.com/gpu running at the same time", self.output)
        self.assertIn("PASS contention: edgegpu-e2e-wait Pending while the others hold every nvidia.com/gpu "
                      "(Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu.)", self.output)
        self.assertIn("PASS contention: edgegpu-e2e-wait ran once a holder had ended", self.output)
        self.assertIn("PASS labels: orin-1 has edgegpu.io/gpu=jetson, nvidia.com/gpu.product=Orin", self.output)
        self.assertIn("PASS metrics: edgegpu-device-plugin-jetson-abcde serves /metrics on :9400 (1 GPU series: "
                      "DCGM_FI_DEV_GPU_UTIL", self.output)
        self.assertIn('PASS metrics: the GPU series name the pod holding the GPU (pod="edgegpu-e2e-hold-0")',
                      self.output)
        self.assertIn("e2e-node: 8 passed, 0 failed", self.output)
        self.assert_cleaned_up()

    def test_unlabelled_node_and_metrics_without_pods_fail(self):
        self.assertEqual(self.run_script(labeller=False, attribution=False), 1, self.output)
        self.assertIn("FAIL labels: orin-1 lacks edgegpu.io/gpu or nvidia.com/gpu.present=true", self.output)
        self.assertIn('FAIL metrics: no GPU series with pod="edgegpu-e2e-hold-0"', self.output)
        self.assertIn("e2e-node: 6 passed, 2 failed", self.output)
        self.assert_cleaned_up()

    def test_metrics_checks_can_be_skipped(self):
        self.assertEqual(self.run_script("--no-metrics"), 0, self.output)
        self.assertNotIn("metrics:", self.output)
        self.assertIn("e2e-node: 6 passed, 0 failed", self.output)

    def test_time_slicing_replicas_run_together(self):
        code = self.run_script("--config", str(self.tmp / "deploy/examples/time-slicing-jetson.yaml"), "--expect", "4")
        self.assertEqual(code, 0, self.output)
        self.assertIn("PASS node orin-1 advertises nvidia.com/gpu: 4", self.output)
        self.assertIn("PASS contention: 4 pod(s) each with 1 nvidia.com/gpu running at the same time", self.output)
        self.assertIn("e2e-node: 8 passed, 0 failed", self.output)
        # Applied config removed again, and the plugin restarted to drop it.
        self.assert_cleaned_up()
        self.assertEqual(self.final["restarts"], 3, self.output)

    def test_node_that_never_advertises_fails(self):
        self.assertEqual(self.run_script("--timeout", "2", gpus=0), 1, self.output)
        self.assertIn("FAIL node orin-1 does not advertise nvidia.com/gpu", self.output)
        self.assertIn("plugin log line", self.output)
        self.assertIn("e2e-node: 0 passed, 1 failed", self.output)
        self.assert_cleaned_up()

    def test_devicequery_failure_fails(self):
        self.assertEqual(self.run_script(job_log="cudaGetDeviceCount returned 100\nResult = FAIL"), 1, self.output)
        self.assertIn("FAIL devicequery: no 'Result = PASS'", self.output)
        self.assertIn("e2e-node: 7 passed, 1 failed", self.output)
        self.assert_cleaned_up()

    def test_scheduler_that_overcommits_fails(self):
        self.assertEqual(self.run_script(overcommit=True), 1, self.output)
        self.assertIn("FAIL contention: edgegpu-e2e-wait was not held back", self.output)
        self.assert_cleaned_up()

    def test_existing_config_map_is_not_touched(self):
        config = "version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: nvidia.com/gpu, replicas: 2}]\n"
        existing = {"kube-system/edgegpu-device-plugin-jetson-config": {"data": {"config.yaml": config}}}
        code = self.run_script("--config", str(self.tmp / "deploy/examples/time-slicing-jetson.yaml"),
                               configmaps=existing)
        self.assertEqual(code, 1, self.output)
        self.assertIn("already exists", self.output)
        self.assertEqual(self.final["configmaps"], existing)

    def run_limits(self, *args, config="mps-jetson.yaml", expect="4", **state):
        # The chart (mps.enabled) is installed already: --no-apply.
        state = {"companion": True, "plugin_deployed": True, "plugin_started": time.time(), **state}
        return self.run_script("--no-apply", "--config", str(self.tmp / "deploy/examples" / config),
                               "--expect", expect, "--limits", "--limits-hold", "3", *args, **state)

    def test_mps_limits_hold_in_two_pods(self):
        self.assertEqual(self.run_limits(), 0, self.output)
        self.assertIn("==> limits: MPS companion kube-system/edgegpu-mps-control-daemon-x7k2p runs on orin-1",
                      self.output)
        self.assertIn("==> limits: edgegpu-e2e-limits-check runs devicequery --check-limits with 1 nvidia.com/gpu "
                      "(example/devicequery:test)", self.output)
        # mps-jetson.yaml: pinnedDeviceMemoryLimit 4Gi.
        self.assertIn("Memory limit checked:                          4096 MiB (4294967296 bytes)", self.output)
        self.assertIn("PASS limits: --check-limits in edgegpu-e2e-limits-check: the limit held (Result = PASS)",
                      self.output)
        self.assertIn("PASS limits: edgegpu-e2e-limits-hold holds 1024 MiB under its 4096 MiB limit", self.output)
        self.assertIn("PASS limits: edgegpu-e2e-limits-over was refused 5120 MiB beyond its 4096 MiB limit "
                      "(CUDA_ERROR_OUT_OF_MEMORY)", self.output)
        self.assertIn("PASS limits: edgegpu-e2e-limits-hold kept running with its 1024 MiB while "
                      "edgegpu-e2e-limits-over was refused", self.output)
        self.assertIn("PASS limits: edgegpu-e2e-limits-hold held its memory for 3s and freed it (Result = PASS)",
                      self.output)
        self.assertIn("e2e-node: 13 passed, 0 failed", self.output)
        self.assert_cleaned_up()

    def test_mps_limits_not_enforced_fail(self):
        self.assertEqual(self.run_limits(companion=False, mps_enforced=False), 1, self.output)
        self.assertIn("==> limits: no MPS companion on orin-1", self.output)
        self.assertIn("FAIL limits: --check-limits in edgegpu-e2e-limits-check: devicequery: check failed: "
                      "--check-limits: the limit is not enforced", self.output)
        self.assertIn("FAIL limits: edgegpu-e2e-limits-over allocated 5120 MiB, more than its 4096 MiB limit: "
                      "the limit is not enforced", self.output)
        self.assertIn("e2e-node: 11 passed, 2 failed", self.output)
        self.assert_cleaned_up()

    def test_limits_on_a_gpu_shared_without_limits_fail(self):
        self.assertEqual(self.run_limits(config="time-slicing-jetson.yaml"), 1, self.output)
        self.assertIn("FAIL limits: --check-limits in edgegpu-e2e-limits-check: devicequery: check failed: "
                      "--check-limits: no memory limit was given for device 0", self.output)
        self.assertIn("FAIL limits: edgegpu-e2e-limits-check was given no GPU memory limit (is nvidia.com/gpu "
                      "shared with sharing.mps or sharing.gpuMemory?)", self.output)
        self.assertNotIn("edgegpu-e2e-limits-hold", self.output)
        self.assert_cleaned_up()

    def test_limits_need_two_free_devices(self):
        state = {"plugin_deployed": True, "plugin_started": time.time()}
        self.assertEqual(self.run_script("--no-apply", "--limits", "--limits-count", "1", **state), 1, self.output)
        self.assertIn("FAIL limits: two pods of 1 nvidia.com/gpu need 2 free, orin-1 has 1", self.output)
        self.assert_cleaned_up()

    def test_usage_errors(self):
        result = subprocess.run([str(self.tmp / "scripts" / "e2e-node.sh"), "--hold", "soon"], env=self.env,
                                capture_output=True, text=True, check=False)
        self.assertEqual(result.returncode, 2)
        self.assertIn("--hold must be a number of seconds", result.stderr)
        result = subprocess.run([str(self.tmp / "scripts" / "e2e-node.sh"), "--limits-count", "0"], env=self.env,
                                capture_output=True, text=True, check=False)
        self.assertEqual(result.returncode, 2)
        self.assertIn("--limits-count must be a number >= 1", result.stderr)
        result = subprocess.run([str(self.tmp / "scripts" / "e2e-node.sh"), "--limits"], env=self.env,
                                capture_output=True, text=True, check=False)
        self.assertEqual(result.returncode, 2)
        self.assertIn("--limits needs --no-apply: MPS comes with the Helm chart (mps.enabled)", result.stderr)


if __name__ == "__main__":
    unittest.main()
