"""Unit tests of the launcher's placement and command line (launch/pstrain_launch).

    python3 -m unittest discover -s tests/launch -p 'test_*.py'    (ctest: launch_placement)
"""

import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch"))

from pstrain_launch import check, cli, devices, placement, steps  # noqa: E402
from pstrain_launch.placement import Host, PlacementError  # noqa: E402


class HostfileTest(unittest.TestCase):
    def test_open_mpi_format_with_comments_and_slots(self):
        text = "# cluster\nnode1 slots=2\n\nnode2   # one slot\nnode3 slots=4 max_slots=8\n"
        self.assertEqual(placement.parse_hostfile(text), [Host("node1", 2), Host("node2", 1), Host("node3", 4)])

    def test_a_host_named_twice_adds_its_slots(self):
        self.assertEqual(placement.parse_hostfile("a slots=2\nb\na\n"), [Host("a", 3), Host("b", 1)])

    def test_errors_name_file_and_line(self):
        with self.assertRaisesRegex(PlacementError, r"^hosts:2: 'slots=0' is not a positive integer"):
            placement.parse_hostfile("a\nb slots=0\n", "hosts")
        with self.assertRaisesRegex(PlacementError, r"^hosts:1: unknown field 'cpus=2' \(expected slots=N or batch="):
            placement.parse_hostfile("a cpus=2\n", "hosts")
        with self.assertRaisesRegex(PlacementError, r"^hosts: no hosts"):
            placement.parse_hostfile("# nothing\n\n", "hosts")
        with self.assertRaisesRegex(PlacementError, r"'a;b' is not a host name"):
            placement.parse_hostfile("a;b\n", "hosts")

    def test_batch_per_slot_for_all_slots_or_implying_the_slots(self):
        hosts = placement.parse_hostfile("a slots=2 batch=64,32\nb slots=3 batch=16\nc batch=8,8,4\nd\n")
        self.assertEqual([(h.name, h.slots, h.batch) for h in hosts],
                         [("a", 2, (64, 32)), ("b", 3, (16, 16, 16)), ("c", 3, (8, 8, 4)), ("d", 1, ())])
        self.assertEqual(placement.parse_hostfile("a batch=64\n")[0], Host("a", 1, (64,)))

    def test_a_host_named_twice_keeps_each_lines_batches(self):
        self.assertEqual(placement.parse_hostfile("a batch=64\nb\na slots=2\n")[0], Host("a", 3, (64, None, None)))

    def test_which_slots_were_stated(self):
        stated = {h.name: h.stated for h in placement.parse_hostfile("a slots=2\nb\nc batch=1,2\nd batch=1\ne\ne\n")}
        self.assertEqual(stated, {"a": True, "b": False, "c": True, "d": False, "e": True})
        self.assertEqual([h.stated for h in placement.parse_host_list("a:2,b,c,c")], [True, False, True])

    def test_batch_errors_name_file_line_and_value(self):
        with self.assertRaisesRegex(PlacementError, r"^hosts:2: batch=64,0: '0' is not a positive integer$"):
            placement.parse_hostfile("a\nb batch=64,0\n", "hosts")
        with self.assertRaisesRegex(PlacementError, r"^hosts:1: batch=x: 'x' is not a positive integer$"):
            placement.parse_hostfile("a batch=x\n", "hosts")
        with self.assertRaisesRegex(PlacementError, r"^hosts:1: batch= lists 3 sizes for 2 slot\(s\)"):
            placement.parse_hostfile("a slots=2 batch=1,2,3\n", "hosts")
        with self.assertRaisesRegex(PlacementError, r"^hosts:1: unknown field 'batch='"):
            placement.parse_hostfile("a batch=\n", "hosts")

    def test_host_list(self):
        self.assertEqual(placement.parse_host_list("n1:2,n2:2,n3"), [Host("n1", 2), Host("n2", 2), Host("n3", 1)])
        self.assertEqual(placement.parse_host_list("[::1]:2,[fe80::1]"), [Host("[::1]", 2), Host("[fe80::1]", 1)])
        with self.assertRaisesRegex(PlacementError, "-H: 'n1:x' is not a positive integer"):
            placement.parse_host_list("n1:x")
        with self.assertRaisesRegex(PlacementError, "no hosts"):
            placement.parse_host_list(",")


class PlaceTest(unittest.TestCase):
    hosts = [Host("a", 2), Host("b", 1), Host("c", 1)]

    def test_ps_round_robin_and_workers_fill_slots_in_order(self):
        procs = placement.place(self.hosts, 2, 4, base_port=7000)
        self.assertEqual([(p.name, p.host, p.local_rank, p.port) for p in procs], [
            ("ps0", "a", 0, 7000), ("ps1", "b", 0, 7001),
            ("w0", "a", 0, 0), ("w1", "a", 1, 0), ("w2", "b", 0, 0), ("w3", "c", 0, 0)])

    def test_more_shards_than_hosts_wrap_with_local_ranks(self):
        procs = placement.place(self.hosts, 4, 1)
        self.assertEqual([(p.host, p.local_rank) for p in procs[:4]], [("a", 0), ("b", 0), ("c", 0), ("a", 1)])

    def test_ps_hosts_list(self):
        procs = placement.place(self.hosts, 3, 1, ps_hosts=["c"])
        self.assertEqual([p.host for p in procs if p.role == "ps"], ["c", "c", "c"])
        with self.assertRaisesRegex(PlacementError, "--ps-hosts-list: 'z' is not one of the job's hosts"):
            placement.place(self.hosts, 1, 1, ps_hosts=["z"])

    def test_too_few_slots_unless_oversubscribed(self):
        with self.assertRaisesRegex(PlacementError, r"5 workers but the hosts have 4 slot\(s\) \(a:2, b:1, c:1\)"):
            placement.place(self.hosts, 1, 5)
        procs = placement.place(self.hosts, 1, 5, oversubscribe=True)
        self.assertEqual([(p.host, p.local_rank) for p in procs[1:]], [("a", 0), ("a", 1), ("b", 0), ("c", 0), ("a", 2)])

    def test_deterministic_and_labelled(self):
        self.assertEqual(placement.place(self.hosts, 2, 4), placement.place(self.hosts, 2, 4))
        self.assertEqual(placement.place(self.hosts, 1, 1)[1].label, "w0@a")
        self.assertEqual(placement.place([Host("localhost")], 1, 1)[1].label, "w0")


class DevicesTest(unittest.TestCase):
    def test_entries(self):
        self.assertEqual(devices.parse("cuda:0,cuda:2,cpu"), ["cuda:0", "cuda:2", "cpu"])
        self.assertEqual(devices.parse("cuda, cpu"), ["cuda", "cpu"])
        for text, named in (("cuda:0,gpu1", "'gpu1' is not"), ("cuda:-1", "'cuda:-1' is not"), ("auto", "'auto' is not"),
                            ("cuda:", "'cuda:' is not"), ("cpu,,cpu", "an empty entry is not")):
            with self.assertRaisesRegex(PlacementError, f"^--devices: {named} cpu, cuda or cuda:K"):
                devices.parse(text)

    def test_cuda_visible_devices(self):
        devices.check_visible(["cuda:7"], None)  # not set: not checked
        devices.check_visible(["cuda:0", "cuda:1", "cuda", "cpu"], "4,6")
        devices.check_visible(["cpu"], "")
        with self.assertRaisesRegex(PlacementError, r"^--devices: cuda:2 needs 3 visible GPU\(s\), but "
                                                    r"CUDA_VISIBLE_DEVICES='4,6' leaves 2 \(cuda:K counts"):
            devices.check_visible(["cuda:0", "cuda:2"], "4,6")
        with self.assertRaisesRegex(PlacementError, r"cuda needs 1 visible GPU\(s\), but CUDA_VISIBLE_DEVICES='' "
                                                    r"leaves 0"):
            devices.check_visible(["cuda"], "")

    def test_every_host_runs_one_worker_per_device(self):
        hosts = placement.parse_hostfile("a batch=64\nb slots=2 batch=8,4\nc\n")
        hosts = placement.one_worker_per_device(hosts, 2)
        self.assertEqual(hosts, [Host("a", 2, (64, 64)), Host("b", 2, (8, 4)), Host("c", 2)])
        procs = placement.place(hosts, 1, 6, devices=["cuda:1", "cpu"])
        self.assertEqual([(p.host, p.local_rank, p.device, p.batch) for p in procs if p.role == "worker"], [
            ("a", 0, "cuda:1", 64), ("a", 1, "cpu", 64), ("b", 0, "cuda:1", 8), ("b", 1, "cpu", 4),
            ("c", 0, "cuda:1", None), ("c", 1, "cpu", None)])
        self.assertEqual(procs[0].device, "")  # PS shards get no device

    def test_stated_slots_must_match_the_devices(self):
        with self.assertRaisesRegex(PlacementError, r"^b has 3 slot\(s\) but --devices lists 2 device\(s\); .* "
                                                    r"\(give b 2 slots, or none\)"):
            placement.one_worker_per_device(placement.parse_host_list("a,b:3"), 2)


class WorkerBatchTest(unittest.TestCase):
    def test_batch_follows_the_slot_also_when_oversubscribed(self):
        procs = placement.place([Host("a", 2, (64, 32)), Host("b", 1)], 1, 5, oversubscribe=True)
        self.assertEqual([p.batch for p in procs[1:]], [64, 32, None, 64, 32])
        self.assertEqual(placement.worker_batches(procs, 16), [64, 32, 16, 64, 32])

    def test_no_list_unless_batch_reached_a_worker(self):
        self.assertIsNone(placement.worker_batches(placement.place([Host("a", 2)], 1, 2), 64))
        self.assertIsNone(placement.worker_batches(placement.place([Host("a", 1), Host("b", 1, (8,))], 1, 1), 64))

    def test_auto_batch_size_needs_batch_on_every_host(self):
        procs = placement.place([Host("a", 1, (8,)), Host("b", 1), Host("c", 1)], 1, 3)
        with self.assertRaisesRegex(PlacementError, r"^b, c have no batch= in the hostfile and --batch-size is auto"):
            placement.worker_batches(procs, None)

    def test_parse_batch_list(self):
        self.assertEqual(placement.parse_batch_list("64,32, 96", "--worker-batch"), [64, 32, 96])
        for text, bad in (("64,0", "0"), ("64,", ""), ("-1", "-1"), ("6.5", "6.5")):
            with self.assertRaisesRegex(PlacementError, f"^--worker-batch: '{bad}' is not a positive integer$"):
                placement.parse_batch_list(text, "--worker-batch")

    def test_placement_shows_device_and_batch(self):
        procs = placement.place([Host("a", 2, (64, 8))], 1, 2, devices=["cuda:10", "cpu"])
        self.assertEqual(placement.describe(procs), [
            "ps0  on a  local rank 0",
            "w0   on a  local rank 0  device cuda:10  batch 64",
            "w1   on a  local rank 1  device cpu      batch 8"])


def settings(*argv, env=None):
    """cli.Settings of a launch.sh command line (CUDA_VISIBLE_DEVICES unset unless in env)."""
    environ = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    with mock.patch.dict(os.environ, {**environ, **(env or {})}, clear=True):
        return cli.Settings(*cli.parse_args(list(argv)))


def commands(s):
    """{process name: its command} as --dry-run prints them (ssh: the command ssh runs)."""
    return {p.name: cmd for p, cmd in cli.Run(s, cli.Output()).planned_commands()}


class ResumeCommandLineTest(unittest.TestCase):
    def test_resume_and_resume_auto_reach_every_process(self):
        for argv, want in ((("--resume",), "--resume"), (("--resume", "auto"), "--resume=auto"),
                           (("--resume=auto",), "--resume=auto")):
            s = settings(*argv, "--", "--checkpoint-dir", "/tmp/ckpt")
            for name, cmd in commands(s).items():
                self.assertEqual([a for a in cmd if a.startswith("--resume")], [want], f"{argv} {name}")

    def test_resume_errors(self):
        with self.assertRaisesRegex(cli.UsageError, "^--resume needs the job's --checkpoint-dir"):
            settings("--resume", "auto")
        with self.assertRaisesRegex(cli.UsageError, r"^--resume=sometimes: the value is auto \(or none\)"):
            settings("--resume=sometimes", "--", "--checkpoint-dir", "/tmp/ckpt")


class SecurityCommandLineTest(unittest.TestCase):
    """CURVE by one rule for the whole job (docs/security.md): every process gets --curve when
    they bind off loopback, unless the job says --insecure; the PS alone turning it on (its own
    default) left the workers reaching it over ipc:// or 127.0.0.1 in the clear (issue 50)."""

    def curve_flags(self, s):
        return {name: cmd.count("--curve") for name, cmd in commands(s).items()}

    def test_every_process_gets_curve_when_any_binds_off_loopback(self):
        for argv in (("--bind", "0.0.0.0"), ("--bind", "0.0.0.0", "--transport", "tcp"),
                     ("--bind", "10.1.2.3"), ("--", "--bind", "0.0.0.0"),
                     ("--bind", "0.0.0.0", "--", "--curve"), ("-H", "a,b", "--num-workers", "2"),
                     ("--bind", "0.0.0.0", "--", "--mode", "allreduce")):
            s = settings("--num-ps", "2", "--num-workers", "2", *argv)
            flags = self.curve_flags(s)
            self.assertTrue(s.curve, argv)
            self.assertEqual(set(flags.values()), {1}, f"{argv}: {flags}")
            self.assertEqual(len(flags), 2 * (s.num_ps > 0) + 2, argv)

    def test_none_on_loopback_or_with_insecure(self):
        for argv in ((), ("--bind", "127.0.0.1"), ("--bind", "localhost"), ("-H", "127.0.0.1,localhost"),
                     ("--bind", "0.0.0.0", "--", "--insecure")):
            s = settings("--num-workers", "2", *argv)
            self.assertFalse(s.curve, argv)
            self.assertEqual(set(self.curve_flags(s).values()), {0}, argv)


class DevicesCommandLineTest(unittest.TestCase):
    def test_one_worker_per_device_with_its_device(self):
        s = settings("--devices", "cuda:0,cuda:2,cpu")
        self.assertEqual(s.num_workers, 3)
        cmds = commands(s)
        for name, device in (("w0", "cuda:0"), ("w1", "cuda:2"), ("w2", "cpu")):
            self.assertEqual(cmds[name][cmds[name].index("--device") + 1], device)
            self.assertIn("--num-workers 3", " ".join(cmds[name]))
        self.assertNotIn("--device", cmds["ps0"])
        self.assertIn("--num-workers 3", " ".join(cmds["ps0"]))
        self.assertEqual(settings("--devices", "cpu,cpu", "--num-workers", "2").num_workers, 2)

    def test_usage_errors(self):
        with self.assertRaisesRegex(cli.UsageError, r"^--num-workers 4, but --devices starts one worker per device: "
                                                    r"3 device\(s\) make 3 workers"):
            settings("--devices", "cpu,cpu,cpu", "--num-workers", "4")
        with self.assertRaisesRegex(cli.UsageError, "^--devices: 'tpu:0' is not cpu, cuda or cuda:K"):
            settings("--devices", "cuda:0,tpu:0")
        with self.assertRaisesRegex(cli.UsageError, "^--devices gives every worker its --device; drop --device"):
            settings("--devices", "cpu", "--", "--device", "cuda")
        with self.assertRaisesRegex(cli.UsageError, r"^--devices: cuda:1 needs 2 visible GPU\(s\), "
                                                    r"but CUDA_VISIBLE_DEVICES='3'"):
            settings("--devices", "cuda:0,cuda:1", env={"CUDA_VISIBLE_DEVICES": "3"})
        self.assertEqual(settings("--devices", "cuda:0,cuda:1", env={"CUDA_VISIBLE_DEVICES": "3,1"}).num_workers, 2)

    def test_per_host_across_hosts(self):
        s = settings("-H", "a,b", "--devices", "cuda:1,cuda:0")
        self.assertEqual([(p.label, p.local_rank, p.device) for p in s.procs if p.role == "worker"], [
            ("w0@a", 0, "cuda:1"), ("w1@a", 1, "cuda:0"), ("w2@b", 0, "cuda:1"), ("w3@b", 1, "cuda:0")])
        w3 = commands(s)["w3"]
        self.assertEqual(w3[w3.index("--local-rank"):w3.index("--device") + 2],
                         ["--local-rank", "1", "--device", "cuda:0"])
        with self.assertRaisesRegex(cli.UsageError, r"--devices starts one worker per device: 2 device\(s\) on each of "
                                                    r"2 hosts make 4 workers"):
            settings("-H", "a,b", "--devices", "cuda:1,cuda:0", "--num-workers", "2")
        with self.assertRaisesRegex(cli.UsageError, r"^a has 4 slot\(s\) but --devices lists 2"):
            settings("-H", "a:4,b", "--devices", "cuda:1,cuda:0")

    def test_cuda_visible_devices_goes_to_other_hosts_with_devices_only(self):
        env = {"CUDA_VISIBLE_DEVICES": "2,3"}
        with mock.patch.dict(os.environ, env):
            with_devices = settings("-H", "a", "--devices", "cuda:1", env=env)
            ssh = cli.Run(with_devices, cli.Output()).remote_argv(with_devices.procs[1], ["w"])
            # Other forwarded variables (FASHION_MNIST_DIR, where set) may stand between env and it.
            self.assertRegex(ssh[-1], r" env( [A-Z_]+=\S*)* CUDA_VISIBLE_DEVICES=2,3 w$")
            mpi = settings("--launcher", "mpirun", "--devices", "cuda:1", env=env)
            argv = cli.Run(mpi, cli.Output()).make_step().argv()
            self.assertEqual(argv[argv.index("CUDA_VISIBLE_DEVICES") - 1], "-x")
            self.assertNotIn("CUDA_VISIBLE_DEVICES", settings("-H", "a", "--num-workers", "1", env=env).forwarded_env())


class WorkerBatchCommandLineTest(unittest.TestCase):
    def hostfile(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".hosts", delete=False) as f:
            f.write(text)
        self.addCleanup(os.remove, f.name)
        return f.name

    def test_given_list_reaches_every_process(self):
        s = settings("--num-workers", "3", "--worker-batch", "64,32,96")
        self.assertEqual([p.batch for p in s.procs], [None, 64, 32, 96])
        for name, cmd in commands(s).items():
            self.assertEqual(cmd[-2:], ["--worker-batch", "64,32,96"], name)
        after = settings("--num-workers", "2", "--", "--worker-batch=8,4")
        self.assertEqual((after.worker_batch, after.extra), ([8, 4], ["--worker-batch=8,4"]))

    def test_given_list_errors(self):
        with self.assertRaisesRegex(cli.UsageError, r"^--worker-batch gives 2 batch size\(s\) for 3 workers$"):
            settings("--num-workers", "3", "--worker-batch", "64,32")
        with self.assertRaisesRegex(cli.UsageError, "^--worker-batch: '0' is not a positive integer$"):
            settings("--num-workers", "2", "--worker-batch", "64,0")
        with self.assertRaisesRegex(cli.UsageError, "^--worker-batch is given twice"):
            settings("--num-workers", "1", "--worker-batch", "64", "--", "--worker-batch", "64")
        with self.assertRaisesRegex(cli.UsageError, "^--worker-batch and --global-batch both set the batch"):
            settings("--num-workers", "1", "--worker-batch", "64", "--", "--global-batch", "64")

    def test_hostfile_batches_in_worker_order(self):
        hosts = self.hostfile("n1 slots=2 batch=64,32\nn2 batch=16\nn3\n")
        s = settings("--hostfile", hosts, "--num-workers", "4", "--", "--batch-size", "48", "--lr", "0.1")
        self.assertEqual(s.worker_batch, [64, 32, 16, 48])
        for name, cmd in commands(s).items():  # the list replaces --batch-size, which it holds now
            self.assertEqual(cmd[-4:], ["--lr", "0.1", "--worker-batch", "64,32,16,48"], name)
            self.assertNotIn("--batch-size", cmd)
        default = settings("--hostfile", hosts, "--num-workers", "4", "--", "--accum-steps", "2")
        self.assertEqual(default.worker_batch, [64, 32, 16, 128])  # the config's batch-size 64 x 2
        auto = settings("--hostfile", hosts, "--num-workers", "3", "--", "--batch-size", "auto")
        self.assertEqual((auto.worker_batch, auto.extra),
                         ([64, 32, 16], ["--batch-size", "auto", "--worker-batch", "64,32,16"]))
        unreached = settings("--hostfile", self.hostfile("n1 slots=2\nn2 batch=8\n"), "--num-workers", "2")
        self.assertIsNone(unreached.worker_batch)  # no worker on n2

    def test_hostfile_batch_errors(self):
        hosts = self.hostfile("n1 slots=2 batch=64,32\nn2\n")
        with self.assertRaisesRegex(cli.UsageError, "^--worker-batch and batch= in the hostfile both set"):
            settings("--hostfile", hosts, "--num-workers", "3", "--worker-batch", "1,2,3")
        with self.assertRaisesRegex(cli.UsageError, "^batch= in the hostfile and --global-batch both set the batch"):
            settings("--hostfile", hosts, "--num-workers", "3", "--", "--global-batch", "96")
        with self.assertRaisesRegex(cli.UsageError, "^n2 has no batch= in the hostfile and --batch-size is auto"):
            settings("--hostfile", hosts, "--num-workers", "3", "--", "--batch-size", "auto")
        with self.assertRaisesRegex(cli.UsageError, r":1: batch= lists 3 sizes for 2 slot\(s\)"):
            settings("--hostfile", self.hostfile("n1 slots=2 batch=1,2,3\n"))

    def test_dry_run_prints_devices_batches_and_commands(self):
        hosts = self.hostfile("n1 batch=64,32\nn2 batch=16\n")
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        env.update(PYTHONPATH=os.path.join(cli.REPO, "launch"), PSTRAIN_PS_BIN=FAKE_PS, PSTRAIN_WORKER_BIN=FAKE_WORKER)
        done = subprocess.run([sys.executable, "-m", "pstrain_launch", "--dry-run", "--hostfile", hosts,
                               "--devices", "cuda:0,cpu"], env=env, capture_output=True, text=True, check=True)
        lines = done.stdout.splitlines()
        self.assertIn("launch:   w3   on n2  local rank 1  device cpu     batch 16", lines)
        w1 = [line for line in lines if line.startswith("w1@n1: ssh ")]
        self.assertEqual(len(w1), 1)
        self.assertIn("--local-rank 1 --device cpu --worker-batch 64,32,16,16'", w1[0])
        self.assertEqual(lines[-1], "launch: checked ps0@n1, w0@n1, w1@n1 with --check-config: "
                                    "fake ps: configuration OK; fake worker: configuration OK")


FAKE_PS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_ps.sh")
FAKE_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_worker.sh")


class DryRunCheckTest(unittest.TestCase):
    """--dry-run's check (check.py): one process of each kind runs here with --check-config."""

    def script(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
            f.write("#!/bin/sh\n" + text)
        os.chmod(f.name, 0o755)
        self.addCleanup(os.remove, f.name)
        return f.name

    def test_one_command_of_each_kind_with_this_hosts_binaries_and_config(self):
        with mock.patch.dict(os.environ, {"PSTRAIN_PS_BIN": "/b/ps", "PSTRAIN_WORKER_BIN": cli.REPO + "/build/w"}):
            s = settings("-H", "a:2,b:2", "--num-workers", "4", "--num-ps", "2", "--remote-dir", "/opt/p",
                         "--config", "configs/fashion_mlp.cfg", "--", "--lr", "0.1")
            chosen = cli.Run(s, cli.Output()).check_commands()
        self.assertEqual([p.name for p, _ in chosen], ["ps0", "w0", "w1"])
        for p, cmd in chosen:
            self.assertEqual(cmd[:3], ["/b/ps" if p.role == "ps" else cli.REPO + "/build/w", "--config", s.config])
            self.assertEqual(cmd[-3:], ["--lr", "0.1", "--check-config"])
        local = settings("--num-workers", "2", "--transport", "tcp", "--", "--mode", "allreduce")
        chosen = cli.Run(local, cli.Output()).check_commands()
        coordinator = [cmd[cmd.index("--coordinator") + 1] for _, cmd in chosen]
        self.assertEqual(coordinator, ["127.0.0.1:0", "127.0.0.1:" + cli.STAND_IN_PORT])  # w0's port is not known yet

    def test_what_the_binary_says(self):
        ok = check.run("w0", [self.script("echo 'pstrain-worker: configuration OK'\n"), "--check-config"], {})
        self.assertEqual((ok.said, ok.refused, ok.unchecked), ("pstrain-worker: configuration OK", None, None))
        refused = check.run("w0", [self.script("echo '10:39:09.099 E pstrain-worker: --lr: bad (see --help)' >&2\n"
                                               "exit 2\n")], {})
        self.assertEqual(refused.refused, "pstrain-worker: --lr: bad (see --help)")
        crashed = check.run("w0", [self.script("echo boom >&2; exit 1\n")], {})
        self.assertEqual(crashed.refused, "boom (exit status 1)")
        old = check.run("w0", [self.script("echo \"E pstrain-ps: unrecognised option '--check-config'\" >&2; exit 2\n")],
                        {})
        self.assertRegex(old.unchecked, r"predates --check-config \(rebuild it\)$")
        self.assertEqual(check.run("w0", ["/nonexistent/pstrain-worker"], {}).unchecked,
                         "/nonexistent/pstrain-worker is not built")

    def test_processes_elsewhere_are_checked_without_our_cluster_variables(self):
        with mock.patch.dict(os.environ, {"SLURM_PROCID": "3", "TF_CONFIG": "{}", "OMPI_COMM_WORLD_RANK": "1",
                                          "PSTRAIN_LOG_LEVEL": "warn"}):
            self.assertEqual(check.environment("local")["SLURM_PROCID"], "3")  # local processes get ours
            for launcher in ("ssh", "slurm", "mpirun"):
                env = check.environment(launcher)
                self.assertFalse({"SLURM_PROCID", "TF_CONFIG", "OMPI_COMM_WORLD_RANK"} & set(env), launcher)
                self.assertEqual(env["PSTRAIN_LOG_LEVEL"], "warn")


class CpuBindTest(unittest.TestCase):
    def test_auto_gives_each_local_worker_a_cpu_of_its_own(self):
        self.assertEqual(placement.worker_cpus("auto", True, 2, {3, 1, 2}), [1, 2])
        self.assertEqual(placement.worker_cpus("auto", True, 3, {0, 1}), [])   # more workers than CPUs
        self.assertEqual(placement.worker_cpus("auto", True, 1, {0, 1}), [])   # nobody to keep apart
        self.assertEqual(placement.worker_cpus("auto", False, 2, {0, 1}), [])  # other hosts' CPUs are unknown
        self.assertEqual(placement.worker_cpus("none", True, 2, {0, 1}), [])
        with self.assertRaisesRegex(PlacementError, "^--cpu-bind: 'all' is not auto or none$"):
            placement.worker_cpus("all", True, 2, {0, 1})

    def test_workers_get_bind_cpu_unless_told_otherwise(self):
        with mock.patch.object(os, "sched_getaffinity", return_value={4, 5, 6}):
            cmds = commands(settings("--num-workers", "2", "--", "--lr", "0.1"))
            for name, cpu in (("w0", "4"), ("w1", "5")):
                self.assertEqual(cmds[name][cmds[name].index("--bind-cpu") + 1], cpu)
                self.assertEqual(cmds[name][-2:], ["--lr", "0.1"])
            self.assertNotIn("--bind-cpu", cmds["ps0"])
            for argv in (("--num-workers", "2", "--cpu-bind", "none"), ("--num-workers", "4"),
                         ("--num-workers", "2", "--", "--bind-cpu", "5")):  # the user's own binding is kept
                cmds = commands(settings(*argv))
                self.assertEqual([" ".join(cmd).count("--bind-cpu") for name, cmd in cmds.items() if name[0] == "w"],
                                 [1 if "5" in argv else 0] * (4 if "4" in argv else 2), argv)
            with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as f:
                f.write("hidden = 16\nbind-cpu = 5  # the user's own, in the config\n")
            self.addCleanup(os.remove, f.name)
            cmds = commands(settings("--num-workers", "2", "--config", f.name))
            self.assertNotIn("--bind-cpu", cmds["w0"] + cmds["w1"])
            with self.assertRaisesRegex(cli.UsageError, "^--cpu-bind: 'yes' is not auto or none$"):
                settings("--num-workers", "2", "--cpu-bind", "yes")


class CommandLineTest(unittest.TestCase):
    def test_flags_values_and_job_flags(self):
        flags, extra = cli.parse_args(["--num-ps", "2", "--hostfile=h", "-H", "a,b", "--dry-run",
                                       "--ssh-option", "Port=2222", "--", "--lr", "0.1"])
        self.assertEqual((flags.num_ps, flags.hostfile, flags.hosts, flags.dry_run), ("2", "h", "a,b", True))
        self.assertEqual(flags.ssh_option, ["Port=2222"])
        self.assertEqual(extra, ["--lr", "0.1"])
        flags, extra = cli.parse_args(["--ssh-option", "A=1", "--ssh-option=B=2", "--resume", "--", "--resume", "x"])
        self.assertEqual((flags.ssh_option, flags.resume, extra), (["A=1", "B=2"], "on", ["--resume", "x"]))
        self.assertEqual(cli.parse_args(["--resume", "auto"])[0].resume, "auto")
        self.assertEqual(cli.parse_args(["--resume=auto", "--dry-run"])[0].resume, "auto")
        self.assertEqual(cli.parse_args(["--num-ps", "1"])[0].num_workers, None)  # not given: the config's

    def test_usage_errors(self):
        with self.assertRaisesRegex(cli.UsageError, "unknown flag '--bogus'"):
            cli.parse_args(["--bogus"])
        with self.assertRaisesRegex(cli.UsageError, "^unknown flag '--bogus' \\(job flags go after --"):
            cli.parse_args(["--bogus=1", "--", "--lr", "0.1"])
        with self.assertRaisesRegex(cli.UsageError, "^unknown flag '--num' "):  # no abbreviations
            cli.parse_args(["--num", "2"])
        with self.assertRaisesRegex(cli.UsageError, "^unexpected argument 'lr' \\(job flags go after --\\)"):
            cli.parse_args(["lr", "0.1"])
        with self.assertRaisesRegex(cli.UsageError, "^--num-ps needs a value$"):
            cli.parse_args(["--num-ps"])
        with self.assertRaisesRegex(cli.UsageError, "^--config needs a value$"):
            cli.parse_args(["--config", "--", "--lr", "0.1"])
        with self.assertRaisesRegex(cli.UsageError, "^--dry-run: ignored explicit argument 'yes'$"):
            cli.parse_args(["--dry-run=yes"])
        with self.assertRaisesRegex(cli.UsageError, "give either --hostfile or -H"):
            cli.Settings(*cli.parse_args(["--hostfile", "x", "-H", "a"]))
        with self.assertRaisesRegex(cli.UsageError, "--launcher ssh needs --hostfile"):
            cli.Settings(*cli.parse_args(["--launcher", "ssh"]))
        with self.assertRaisesRegex(cli.UsageError, "--hostfile: cannot read /nonexistent"):
            cli.Settings(*cli.parse_args(["--hostfile", "/nonexistent/hosts"]))

    def test_auto_launcher_and_remote_defaults(self):
        local = cli.Settings(*cli.parse_args([]))
        self.assertEqual((local.launcher, local.base_port, local.bind), ("local", 0, ""))
        remote = cli.Settings(*cli.parse_args(["-H", "a:2,b", "--num-workers", "3"]))
        self.assertEqual((remote.launcher, remote.base_port, remote.bind), ("ssh", cli.DEFAULT_BASE_PORT, "0.0.0.0"))
        self.assertEqual([p.label for p in remote.procs], ["ps0@a", "w0@a", "w1@a", "w2@b"])

    def test_remote_dir_rewrites_paths_under_the_checkout(self):
        settings = cli.Settings(*cli.parse_args(["-H", "a", "--num-workers", "1", "--remote-dir", "/opt/pstrain"]))
        self.assertEqual(settings.remote_path(os.path.join(cli.REPO, "build", "pstrain-ps")), "/opt/pstrain/build/pstrain-ps")
        self.assertEqual(settings.remote_path("/etc/job.cfg"), "/etc/job.cfg")



class StepTest(unittest.TestCase):
    procs = placement.place([Host("n1", 2), Host("n2", 1)], 1, 3)

    def step(self, kind):
        return steps.Step(kind, self.procs, [["ps", "--index", "0"], ["w", "a b"], ["w"], ["w"]], "/run")

    def test_slurm_task_lists(self):
        self.assertEqual(steps.decode_tasks_per_node("2(x3),1"), [2, 2, 2, 1])
        self.assertEqual(steps.expand_ranks("0,2-4"), [0, 2, 3, 4])
        with self.assertRaisesRegex(PlacementError, "cannot read '2x3'"):
            steps.decode_tasks_per_node("2x3")

    def test_files_fix_each_ranks_command_and_host(self):
        files = self.step("slurm").files()
        self.assertEqual(files["slurm.hosts"], "n1\nn1\nn1\nn2\n")
        self.assertEqual(files["slurm.multiprog"].splitlines()[1], "1 w 'a b'")
        app = self.step("mpirun").files()["mpirun.app"].splitlines()
        self.assertEqual(app[3], "-np 1 --host n2 w")

    def test_output_of_a_rank_goes_to_its_process(self):
        slurm, mpi = self.step("slurm"), self.step("mpirun")
        self.assertEqual(slurm.relay(b" 2: hello\n"), ("w1", "w1@n1", b"hello\n"))
        self.assertEqual(mpi.relay(b"[1,3]<stderr>:bye\n"), ("w2", "w2@n2", b"bye\n"))
        self.assertEqual(slurm.relay(b"srun: something\n")[0], None)

    def test_the_starters_failure_report_names_the_process(self):
        slurm = self.step("slurm")
        slurm.relay(b"srun: error: n1: tasks 1-2: Exited with exit code 1\n")
        self.assertEqual(slurm.describe_failure(1), "w0@n1 w1@n1 died: Exited with exit code 1")
        mpi = self.step("mpirun")
        self.assertEqual(mpi.describe_failure(1), "the mpirun job failed: exit status 1")
        mpi.relay(b"  Process name: [[4242,1],3]\n")
        self.assertEqual(mpi.describe_failure(1), "w2@n2 died: exited with a non-zero status")


if __name__ == "__main__":
    unittest.main()
