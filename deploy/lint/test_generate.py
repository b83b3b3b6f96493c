"""deploy/generate.py's packing of the chart into the k3s HelmChart: what is packed, and when the
committed HelmChart counts as current. (That the outputs match the chart is deploy/generate.py
--check itself, in scripts/validate-manifests.sh.)"""

import base64
import gzip
import io
import subprocess
import sys
import tarfile
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "deploy"))
import generate  # noqa: E402


def recompressed(helmchart, level):
    """HELMCHART with its chart archive gzipped again at LEVEL: other bytes, same tar."""
    head, content = generate.split_helmchart(helmchart)
    tar = gzip.decompress(base64.b64decode(content))
    again = base64.b64encode(gzip.compress(tar, compresslevel=level, mtime=0)).decode()
    return head + "  chartContent: |-\n" + "".join(f"    {again[i:i + 76]}\n" for i in range(0, len(again), 76))


def with_member_changed(helmchart, name, data):
    head, content = generate.split_helmchart(helmchart)
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(content)), mode="r:gz") as old, \
            tarfile.open(fileobj=out, mode="w:gz") as new:
        for member in old.getmembers():
            body = old.extractfile(member).read()
            if member.name == name:
                body, member.size = data, len(data)
            new.addfile(member, io.BytesIO(body))
    content = base64.b64encode(out.getvalue()).decode()
    return head + "  chartContent: |-\n    " + content + "\n"


class HelmChartCurrency(unittest.TestCase):
    def setUp(self):
        self.committed = (REPO / generate.HELMCHART).read_text(encoding="utf-8")

    def test_other_gzip_bytes_of_the_same_files_are_current(self):
        other = recompressed(self.committed, level=1)
        self.assertNotEqual(other, self.committed)
        self.assertTrue(generate.up_to_date(generate.HELMCHART, other, self.committed))

    def test_a_changed_file_or_text_is_stale_and_named(self):
        stale = with_member_changed(self.committed, "edgegpu/values.yaml", b"image: {}\n")
        self.assertFalse(generate.up_to_date(generate.HELMCHART, stale, self.committed))
        self.assertEqual(list(generate.archive_differences(stale, self.committed)),
                         ["chartContent: edgegpu/values.yaml differs"])
        retitled = self.committed.replace("name: edgegpu\n", "name: gpu\n", 1)
        self.assertFalse(generate.up_to_date(generate.HELMCHART, retitled, self.committed))
        broken = generate.split_helmchart(self.committed)[0] + "  chartContent: |-\n    not-base64!\n"
        self.assertFalse(generate.up_to_date(generate.HELMCHART, broken, self.committed))


class PackedFiles(unittest.TestCase):
    def packed(self, git):
        """The chart files chart_files() picks, and the archive's names, in a scratch tree with a
        committed-looking chart plus an editor's backup and a file never added."""
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp)
            chart = repo / "deploy" / "helm" / "edgegpu"
            (chart / "templates").mkdir(parents=True)
            (chart / "Chart.yaml").write_text("apiVersion: v2\nname: edgegpu\nversion: 0.1.0\n")
            (chart / "templates" / "a.yaml").write_text("kind: ConfigMap\n")
            if git:
                subprocess.run(["git", "init", "-q", str(repo)], check=True)
                subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
                (chart / "templates" / "a.yaml~").write_text("an editor's backup\n")
                (chart / "notes.txt").write_text("not added\n")
            saved = generate.REPO, generate.CHART
            generate.REPO, generate.CHART = repo, chart
            try:
                names = [p.relative_to(chart).as_posix() for p in generate.chart_files()]
                with tarfile.open(fileobj=io.BytesIO(generate.chart_archive()), mode="r:gz") as tar:
                    return names, tar.getnames()
            finally:
                generate.REPO, generate.CHART = saved

    def test_only_git_tracked_files_are_packed(self):
        self.assertEqual(self.packed(git=True),
                         (["Chart.yaml", "templates/a.yaml"], ["edgegpu/Chart.yaml", "edgegpu/templates/a.yaml"]))

    def test_an_exported_tree_packs_every_chart_file(self):
        self.assertEqual(self.packed(git=False),
                         (["Chart.yaml", "templates/a.yaml"], ["edgegpu/Chart.yaml", "edgegpu/templates/a.yaml"]))


if __name__ == "__main__":
    unittest.main()
