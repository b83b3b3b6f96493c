//! A Jetson root: the board's detection files, device nodes, GPU sysfs, telemetry files and
//! L4T's container lists, and the setters tests use to change its sensors, nvmap's
//! per-process file and the GPU sysfs.

use super::board_facts::PowerMonitor;
use super::fake_host::FakeHost;
use crate::board::Board;

/// nvmap's per-process debugfs file (the L4T kernel's `nvmap/iovmm/maps`, spelled out here:
/// the testkit does not take the plugin's paths on trust).
const NVMAP_MAPS: &str = "/sys/kernel/debug/nvmap/iovmm/maps";

impl FakeHost {
    /// A Jetson of `board` with every detection signal, device nodes, GPU sysfs and CSV files.
    pub fn jetson(board: Board) -> FakeHost {
        let mut host = FakeHost::empty();
        host.board = Some(board);
        let nul_list = |items: &[&str]| -> Vec<u8> {
            let mut out = Vec::new();
            for i in items {
                out.extend_from_slice(i.as_bytes());
                out.push(0);
            }
            out
        };
        host.write("/proc/device-tree/compatible", nul_list(board.compatible()));
        host.write("/proc/device-tree/model", nul_list(&[board.model()]));
        host.write(
            "/proc/device-tree/nvidia,dtsfilename",
            nul_list(&[board.dtsfilename()]),
        );
        host.write("/sys/devices/soc0/family", "Tegra\n");
        if let Some(id) = board.chip_id() {
            host.write(
                "/sys/module/tegra_fuse/parameters/tegra_chip_id",
                format!("{id}\n"),
            );
        }
        host.write("/etc/nv_tegra_release", board.nv_tegra_release());
        for node in board.device_nodes() {
            host.write(node, "");
        }
        // L4T's container lists and the libraries, links and files they name.
        for entry in crate::l4t::layout(board) {
            match entry {
                crate::l4t::Entry::File { path, contents } => host.write(&path, contents),
                crate::l4t::Entry::Link { path, target } => host.symlink_raw(&path, &target),
            }
        }

        // GPU sysfs: device dir with `load` and `of_node/name`, devfreq dir with `cur_freq`,
        // and /sys/class/devfreq/<name> as a relative link, as the kernel makes it.
        let (dev, devfreq, of_name, has_load) = board.sysfs();
        if has_load {
            host.write(&format!("{dev}/load"), "0\n");
        }
        host.write(&format!("{dev}/of_node/name"), format!("{of_name}\0"));
        host.write(&format!("{dev}/devfreq/{devfreq}/cur_freq"), "306000000\n");
        // nvpmodel: the board's file linked into place as L4T does, and the devfreq ceiling
        // of its boot-default mode (no status file: the board never ran `nvpmodel -m`).
        if let Some((conf, ceiling, hardware_max)) = board.nvpmodel() {
            let file = format!("/etc/nvpmodel/nvpmodel_{}.conf", board.name());
            host.write(&file, &conf);
            // An absolute link, as on the board: read through the root, never the host.
            host.symlink_raw("/etc/nvpmodel.conf", &file);
            let dir = format!("{dev}/devfreq/{devfreq}");
            host.write(&format!("{dir}/max_freq"), format!("{ceiling}\n"));
            host.write(&format!("{dir}/min_freq"), "306000000\n");
            host.write(
                &format!("{dir}/available_frequencies"),
                format!("306000000 {ceiling} {hardware_max}\n"),
            );
        }
        host.symlink(&format!("{dev}/devfreq/{devfreq}/device"), dev);
        host.symlink(
            &format!("/sys/class/devfreq/{devfreq}"),
            &format!("{dev}/devfreq/{devfreq}"),
        );
        host.write_telemetry_files(board);
        host
    }

    /// Records `id` as the power mode nvpmodel set (`/var/lib/nvpmodel/status`), as
    /// `nvpmodel -m <id>` does; `gpu_ceiling_hz` is what it wrote to the GPU's `max_freq`.
    pub fn set_power_mode(&self, board: Board, id: u32, gpu_ceiling_hz: u64) {
        self.write(
            "/var/lib/nvpmodel/status",
            format!("pmode:{id:04} fmode:quiet\n"),
        );
        let (dev, devfreq, _, _) = board.sysfs();
        self.write(
            &format!("{dev}/devfreq/{devfreq}/max_freq"),
            format!("{gpu_ceiling_hz}\n"),
        );
    }

    /// Thermal zones, the power monitor, `/proc/meminfo` and the EMC files the board exposes
    /// to an unprivileged reader (no debugfs).
    fn write_telemetry_files(&self, board: Board) {
        for (n, (kind, millideg)) in board.thermal_zones().iter().enumerate() {
            let zone = format!("/sys/devices/virtual/thermal/thermal_zone{n}");
            self.write(&format!("{zone}/type"), format!("{kind}\n"));
            self.write(&format!("{zone}/temp"), format!("{millideg}\n"));
            self.symlink(&format!("/sys/class/thermal/thermal_zone{n}"), &zone);
        }
        if let Some(monitor) = board.power_monitor() {
            for (i, (label, millivolts, milliamps)) in monitor.rails.iter().enumerate() {
                self.write_rail(monitor, i, label, *millivolts, *milliamps);
            }
            self.symlink(
                &format!(
                    "/sys/bus/i2c/drivers/{}/{}",
                    monitor.driver, monitor.bus_name
                ),
                monitor.device_dir,
            );
        }
        self.write("/proc/meminfo", board.meminfo(65_536));
        match board {
            // r32: the sysfs actmon and the bandwidth manager's clock (jetson_stats' paths).
            Board::Nano => {
                self.write("/sys/kernel/actmon_avg_activity/mc_all", "48000000\n");
                self.write(
                    "/sys/kernel/debug/clk/override.emc/clk_rate",
                    "1600000000\n",
                );
            }
            // Thor: the bandwidth manager is a devfreq device; no activity file without debugfs.
            Board::Thor => {
                self.write(
                    "/sys/devices/platform/bwmgr/devfreq/bwmgr/cur_freq",
                    "4266000000\n",
                );
                self.symlink(
                    "/sys/class/devfreq/bwmgr",
                    "/sys/devices/platform/bwmgr/devfreq/bwmgr",
                );
            }
            Board::Xavier | Board::Orin | Board::OrinR39 => {}
        }
    }

    fn write_rail(&self, m: PowerMonitor, i: usize, label: &str, millivolts: u32, milliamps: u32) {
        let dir = format!("{}/{}", m.device_dir, m.channel_dir);
        if m.driver == "ina3221x" {
            self.write(&format!("{dir}/rail_name_{i}"), format!("{label}\n"));
            self.write(
                &format!("{dir}/in_voltage{i}_input"),
                format!("{millivolts}\n"),
            );
            self.write(
                &format!("{dir}/in_current{i}_input"),
                format!("{milliamps}\n"),
            );
            let milliwatts = u64::from(millivolts) * u64::from(milliamps) / 1000;
            self.write(
                &format!("{dir}/in_power{i}_input"),
                format!("{milliwatts}\n"),
            );
        } else {
            let n = i + 1;
            self.write(&format!("{dir}/in{n}_label"), format!("{label}\n"));
            self.write(&format!("{dir}/in{n}_input"), format!("{millivolts}\n"));
            self.write(&format!("{dir}/curr{n}_input"), format!("{milliamps}\n"));
        }
    }

    /// Sets the GPU's `load` (per mille). Panics on Thor, which has no `load` file.
    pub fn set_gpu_load(&self, per_mille: u32) {
        let file = self
            .board
            .and_then(Board::load_file)
            .expect("a board with a load file");
        self.write(&file, format!("{per_mille}\n"));
    }

    /// Sets the GPU's devfreq `cur_freq` (Hz).
    pub fn set_gpu_frequency(&self, hz: u64) {
        let board = self.board.expect("a Jetson root");
        self.write(&board.cur_freq_file(), format!("{hz}\n"));
    }

    /// Sets the temperature of the thermal zone of type `kind` (millidegrees C).
    pub fn set_thermal_zone(&self, kind: &str, millidegrees: i64) {
        let zone = self.thermal_zone_dir(kind);
        self.write(&format!("{zone}/temp"), format!("{millidegrees}\n"));
    }

    /// The sysfs directory (host path) of the board's thermal zone of type `kind`.
    fn thermal_zone_dir(&self, kind: &str) -> String {
        let board = self.board.expect("a Jetson root");
        let n = board
            .thermal_zones()
            .iter()
            .position(|(k, _)| *k == kind)
            .unwrap_or_else(|| panic!("{board:?} has no thermal zone {kind}"));
        format!("/sys/devices/virtual/thermal/thermal_zone{n}")
    }

    /// Gives the thermal zone of type `kind` trip point `m` (`passive`, `active`, `hot`,
    /// `critical`) at `millidegrees`, as the kernel lists them (`trip_point_<m>_type`,
    /// `trip_point_<m>_temp`).
    pub fn set_thermal_trip(&self, kind: &str, m: u32, trip: &str, millidegrees: i64) {
        let zone = self.thermal_zone_dir(kind);
        self.write(&format!("{zone}/trip_point_{m}_type"), format!("{trip}\n"));
        self.write(
            &format!("{zone}/trip_point_{m}_temp"),
            format!("{millidegrees}\n"),
        );
    }

    /// Sets one rail's voltage and current (and, on `ina3221x`, its power).
    pub fn set_rail(&self, label: &str, millivolts: u32, milliamps: u32) {
        let monitor = self
            .board
            .and_then(Board::power_monitor)
            .expect("a board with a power monitor");
        let i = monitor
            .rails
            .iter()
            .position(|(l, _, _)| *l == label)
            .unwrap_or_else(|| panic!("no rail {label}"));
        self.write_rail(monitor, i, label, millivolts, milliamps);
    }

    /// Rewrites `/proc/meminfo` with this `NvMapMemUsed` (kB).
    pub fn set_nvmap_used_kb(&self, kb: u64) {
        let board = self.board.expect("a Jetson root");
        self.write("/proc/meminfo", board.meminfo(kb));
    }

    /// Writes nvmap's per-process file (`/sys/kernel/debug/nvmap/iovmm/maps`) with one client
    /// per `(command, pid, KiB)`, in the kernel's format (`nvmap_debug_maps_show`: headers,
    /// client lines, a handle and a mapping line under each, a kernel client, the total).
    pub fn write_nvmap_maps(&self, clients: &[(&str, u32, u64)]) {
        let pad = "";
        let mut text = format!(
            "{:<18} {:>18} {:>8} {:>11}\n",
            "CLIENT", "PROCESS", "PID", "SIZE"
        );
        text.push_str(&format!(
            "{pad:<18} {pad:>18} {:>8} {:>11} {:>8} {:>6} {:>9} {:>21} {:>18}\n",
            "BASE", "SIZE", "FLAGS", "SHARE", "UID", "MAPS", "MAPSIZE"
        ));
        let mut total = 0;
        for (command, pid, kib) in clients {
            total += kib;
            text.push_str(&format!(
                "{:<18} {:>18} {:>8} {:>10}K\n",
                "user", command, pid, kib
            ));
            // A handle line whose last words look like a PID and a size: the parser must
            // not take it for a client.
            text.push_str(&format!(
                "{pad:<18} {pad:<18} {:>8x} {:>10}K {:>8x} {:>6} {:>16} {pad:>12} {pad:>12} {:>6}K\n",
                0, kib, 0x500, 1, "0000000081234567", kib
            ));
            text.push_str(&format!(
                "{pad:<18} {pad:<18} {pad:>8} {pad:>11} {pad:>8} {pad:>6} {pad:>16} {:<12x}-{:>12x} {:>6}K\n",
                0xffff_8000_0000u64, 0xffff_8010_0000u64, kib
            ));
            text.push('\n');
        }
        text.push_str(&format!(
            "{:<18} {:>18} {:>8} {:>10}K\n\n",
            "user", "kernel", 0, 64
        ));
        text.push_str(&format!(
            "{:<18} {:<18} {:>8} {:>10}K\n",
            "total",
            "",
            "",
            total + 64
        ));
        self.write(NVMAP_MAPS, text);
    }

    /// Removes nvmap's per-process file (debugfs not mounted).
    pub fn remove_nvmap_maps(&self) {
        let _ = std::fs::remove_file(self.path(NVMAP_MAPS));
    }

    /// A Jetson of `board` with its DLA and PVA engines ([`Board::engines`]): device nodes,
    /// platform devices with a bound driver and runtime-PM status `suspended` (idle), and
    /// debugfs clock rates.
    pub fn jetson_with_engines(board: Board) -> FakeHost {
        let host = FakeHost::jetson(board);
        for e in board.engines() {
            for n in e.nodes {
                host.write(n, "");
            }
            host.mkdir(&format!("{}/driver", e.sysfs));
            host.write(&format!("{}/power/runtime_status", e.sysfs), "suspended\n");
            host.write(
                &format!("/sys/kernel/debug/clk/{}/clk_rate", e.clock),
                "0\n",
            );
        }
        host
    }

    /// Removes engine `kind` `index` (`"dla"`, 1) entirely: nodes, platform device, clock,
    /// as on a module that has fewer engines (Orin NX 8 GB: one DLA).
    pub fn remove_engine(&self, kind: &str, index: u32) {
        let e = self.engine(kind, index);
        for n in e.nodes {
            let _ = std::fs::remove_file(self.path(n));
        }
        let _ = std::fs::remove_dir_all(self.path(e.sysfs));
        let _ = std::fs::remove_dir_all(self.path(&format!("/sys/kernel/debug/clk/{}", e.clock)));
    }

    /// Sets an engine's runtime-PM status (`active`, `suspended`).
    pub fn set_engine_runtime_status(&self, kind: &str, index: u32, status: &str) {
        let e = self.engine(kind, index);
        self.write(
            &format!("{}/power/runtime_status", e.sysfs),
            format!("{status}\n"),
        );
    }

    /// Sets an engine's debugfs clock rate (Hz).
    pub fn set_engine_clock(&self, kind: &str, index: u32, hz: u64) {
        let e = self.engine(kind, index);
        self.write(
            &format!("/sys/kernel/debug/clk/{}/clk_rate", e.clock),
            format!("{hz}\n"),
        );
    }

    /// Unbinds (`false`) or rebinds (`true`) the engine's platform driver: its `driver`
    /// link goes away or comes back.
    pub fn set_engine_driver_bound(&self, kind: &str, index: u32, bound: bool) {
        let e = self.engine(kind, index);
        let driver = format!("{}/driver", e.sysfs);
        if bound {
            self.mkdir(&driver);
        } else {
            std::fs::remove_dir(self.path(&driver)).expect("unbind the driver");
        }
    }

    fn engine(&self, kind: &str, index: u32) -> super::board_facts::FakeEngine {
        let board = self.board.expect("a Jetson root");
        board
            .engines()
            .into_iter()
            .find(|e| e.kind == kind && e.index == index)
            .unwrap_or_else(|| panic!("{board:?} has no {kind}{index}"))
    }

    /// A Jetson of `board` with its release's NVML where it ships one (JetPack 6 and 7),
    /// installed where L4T puts it (`/usr/lib/aarch64-linux-gnu/nvidia`).
    pub fn jetson_with_nvml(board: Board) -> FakeHost {
        let host = FakeHost::jetson(board);
        match board.nvml() {
            Some(gpu) => host.with_nvml("/usr/lib/aarch64-linux-gnu/nvidia", &[gpu]),
            None => host,
        }
    }

    /// Makes the GPU `load` file unreadable (works as root too: a directory replaces it).
    /// On Thor, which has no `load`, the devfreq `cur_freq` is broken instead.
    pub fn break_gpu_sysfs(&self) {
        let board = self.board.expect("a Jetson root");
        let file = board.load_file().unwrap_or_else(|| board.cur_freq_file());
        let p = self.path(&file);
        std::fs::remove_file(&p).expect("remove sysfs file");
        std::fs::create_dir(&p).expect("replace sysfs file with a directory");
    }

    /// Undoes [`FakeHost::break_gpu_sysfs`].
    pub fn restore_gpu_sysfs(&self) {
        let board = self.board.expect("a Jetson root");
        let file = board.load_file().unwrap_or_else(|| board.cur_freq_file());
        let p = self.path(&file);
        std::fs::remove_dir(&p).expect("remove the directory");
        std::fs::write(&p, "0\n").expect("rewrite sysfs file");
    }
}

/// The fake `nvpmodel`: a `/bin/sh` script (the host tool is exec'd as a program, so a script
/// stands in for it on every architecture) that does what L4T's does to the files edgegpu
/// reads, under the root it is installed in:
///
/// - `-m <id>`: a mode the configuration lacks is refused (`NVPM ERROR`, exit 1). A mode
///   listed in `/etc/fake-nvpmodel-reboot` asks on stdin to confirm a reboot, as L4T's tool
///   does for such changes, and changes nothing unless the answer is `YES`/`yes` (then it
///   records `/fake-nvpmodel-rebooted`). Otherwise it records the mode in
///   `/var/lib/nvpmodel/status` and writes the mode's GPU ceiling (`GPU MAX_FREQ`; `-1`:
///   the highest frequency) to the GPU's devfreq `max_freq`.
/// - `-q`: `NV Power Mode: <name>` and the id on the next line.
///
/// Every call is appended to `/fake-nvpmodel-calls`.
const FAKE_NVPMODEL: &str = r#"#!/bin/sh
root=$(cd "$(dirname "$0")/../.." && pwd)
conf="$root/etc/nvpmodel.conf"
# L4T links the board's file into place with an absolute link: resolve it inside the root.
if [ -L "$conf" ]; then
    target=$(readlink "$conf")
    case "$target" in /*) conf="$root$target" ;; esac
fi
echo "$*" >> "$root/fake-nvpmodel-calls"
mode_line() { awk -v id="$1" '$2 == "POWER_MODEL" { split($3, a, "="); split($4, b, "="); if (a[2] == id) print b[2] }' "$conf"; }
case "$1" in
-q)
    id=$(sed -n 's/^pmode:0*\([0-9][0-9]*\).*/\1/p' "$root/var/lib/nvpmodel/status" 2>/dev/null)
    [ -n "$id" ] || id=$(sed -n 's/^< PM_CONFIG DEFAULT=\([0-9]*\) >/\1/p' "$conf")
    echo "NV Power Mode: $(mode_line "$id")"
    echo "$id"
    ;;
-m)
    id=$2
    name=$(mode_line "$id")
    if [ -z "$name" ]; then
        echo "NVPM ERROR: Invalid power mode id $id" >&2
        exit 1
    fi
    if grep -qx "$id" "$root/etc/fake-nvpmodel-reboot" 2>/dev/null; then
        echo "NVPM WARN: Reboot required for changing to this power mode: $id"
        printf "NVPM WARN: DO YOU WANT TO REBOOT NOW? enter YES/yes to confirm: "
        read -r answer || answer=""
        case "$answer" in
        YES|yes) touch "$root/fake-nvpmodel-rebooted" ;;
        esac
        exit 0
    fi
    mkdir -p "$root/var/lib/nvpmodel"
    printf 'pmode:%04d fmode:quiet\n' "$id" > "$root/var/lib/nvpmodel/status"
    devfreq=$(cat "$root/etc/fake-nvpmodel-devfreq")
    ceiling=$(awk -v id="$id" '$2 == "POWER_MODEL" { split($3, a, "="); inmode = (a[2] == id); next } inmode && $1 == "GPU" && $2 == "MAX_FREQ" { print $3; exit }' "$conf")
    if [ -z "$ceiling" ] || [ "$ceiling" = "-1" ]; then
        ceiling=$(tr ' ' '\n' < "$root$devfreq/available_frequencies" | sort -n | tail -1)
    fi
    echo "$ceiling" > "$root$devfreq/max_freq"
    echo "NVPM VERB: Config file: /etc/nvpmodel.conf"
    ;;
*)
    echo "NVPM ERROR: fake nvpmodel: unsupported arguments $*" >&2
    exit 2
    ;;
esac
"#;

/// The fake `jetson_clocks`: `--store <file>` writes the GPU's devfreq `min_freq` into
/// `<file>`, no argument pins `min_freq` to `max_freq`, `--restore <file>` writes the stored
/// `min_freq` back. Every call is appended to `/fake-jetson-clocks-calls`.
const FAKE_JETSON_CLOCKS: &str = r#"#!/bin/sh
root=$(cd "$(dirname "$0")/../.." && pwd)
echo "$*" >> "$root/fake-jetson-clocks-calls"
devfreq="$root$(cat "$root/etc/fake-nvpmodel-devfreq")"
case "$1" in
--store) mkdir -p "$(dirname "$root$2")"; cat "$devfreq/min_freq" > "$root$2" ;;
--restore) cat "$root$2" > "$devfreq/min_freq" ;;
"") cat "$devfreq/max_freq" > "$devfreq/min_freq" ;;
*) echo "fake jetson_clocks: unsupported arguments $*" >&2; exit 2 ;;
esac
"#;

impl FakeHost {
    /// Installs the fake `nvpmodel` (`/usr/sbin/nvpmodel`) and `jetson_clocks`
    /// (`/usr/bin/jetson_clocks`) for `board`'s GPU devfreq directory.
    pub fn install_power_tools(&self, board: Board) {
        use std::os::unix::fs::PermissionsExt;
        let (dev, devfreq, _, _) = board.sysfs();
        self.write(
            "/etc/fake-nvpmodel-devfreq",
            format!("{dev}/devfreq/{devfreq}"),
        );
        for (path, script) in [
            ("/usr/sbin/nvpmodel", FAKE_NVPMODEL),
            ("/usr/bin/jetson_clocks", FAKE_JETSON_CLOCKS),
        ] {
            self.write(path, script);
            std::fs::set_permissions(self.path(path), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
    }

    /// Makes the fake `nvpmodel -m <id>` ask to confirm a reboot, as L4T's does for a change
    /// that needs one.
    pub fn require_reboot_for_power_mode(&self, id: u32) {
        self.write("/etc/fake-nvpmodel-reboot", format!("{id}\n"));
    }

    /// The arguments of every call of the fake `nvpmodel`, one per line.
    pub fn nvpmodel_calls(&self) -> Vec<String> {
        self.read_calls("/fake-nvpmodel-calls")
    }

    /// The arguments of every call of the fake `jetson_clocks`, one per line.
    pub fn jetson_clocks_calls(&self) -> Vec<String> {
        self.read_calls("/fake-jetson-clocks-calls")
    }

    fn read_calls(&self, path: &str) -> Vec<String> {
        std::fs::read_to_string(self.path(path))
            .map(|t| t.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }
}
