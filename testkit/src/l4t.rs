//! L4T's container lists (`/etc/nvidia-container-runtime/host-files-for-container.d/*.csv`)
//! of each simulated board, and the files they name, laid out as the board's release lays
//! them out. What the lists look like, from the sources:
//!
//! - JetPack 4 and 5 ship one `l4t.csv`: device nodes (r32's older lines name them bare,
//!   `dev, nvhost-gpu`), libraries in `/usr/lib/aarch64-linux-gnu/tegra` (a real directory
//!   there), `sym` lines for the links, `dir` lines, and `lib` lines that are not libraries
//!   (firmware, programs, JSON). Lines from meta-tegra's copy of JetPack 5's list
//!   (`recipes-bsp/tegra-binaries/tegra-configs/l4t.csv`, branch scarthgap-l4t-r35.x) with
//!   JetPack's paths; it lists `/lib/firmware/tegra19x/nvhost_nvdec040_ns.fw` twice and the
//!   directory holding it as a `dir` line.
//! - JetPack 6 and 7 ship `devices.csv` and `drivers.csv` (meta-tegra: the same files,
//!   branches walnascar for r36.4.3, master-l4t-r38.2.x for r38, master for r39.2): the
//!   device lists are copied as they are; the driver lists keep the kinds of line the real
//!   ones have — `sym, …/tegra` (a link to the `nvidia` directory, so entries under `tegra/`
//!   reach files in `nvidia/`), chains such as `libcuda.so` → `tegra/libcuda.so` →
//!   `libcuda.so.1.1`, the duplicated firmware line, `lib, /usr/sbin/nvidia-smi`, weston
//!   programs, JSON and `ld.so.conf` files — with JetPack's paths (meta-tegra moves the
//!   libraries from `…/nvidia/` to `/usr/lib`). The Orin r36 root also keeps a JetPack 5 era
//!   `l4t.csv` whose entries go through `tegra/` and repeat drivers.csv's.
//!
//! Each list also names entries the board does not have, which the generator skips (as the
//! NVIDIA runtime does). Which device nodes exist is `Board::device_nodes`.

use crate::board::Board;

const LIB: &str = "/usr/lib/aarch64-linux-gnu";

/// JetPack 4.6 (r32.7) `l4t.csv`, the Nano's.
const NANO_L4T: &str = "\
dev, /dev/fb0
dev, /dev/fb1
dev, nvhost-as-gpu
dev, nvhost-ctrl
dev, nvhost-ctrl-gpu
dev, nvhost-dbg-gpu
dev, nvhost-gpu
dev, nvhost-nvdec
dev, nvhost-nvjpg
dev, nvhost-prof-gpu
dev, nvhost-vic
dev, nvhost-msenc
dev, /dev/nvidiactl
dev, /dev/nvmap
dev, /dev/tegra_dc_0
dev, /dev/tegra_dc_1
dev, /dev/tegra_dc_ctrl
lib, /usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1.1
sym, /usr/lib/aarch64-linux-gnu/tegra/libcuda.so
sym, /usr/lib/aarch64-linux-gnu/libcuda.so
lib, /usr/lib/aarch64-linux-gnu/tegra/libnvrm_gpu.so
lib, /usr/lib/aarch64-linux-gnu/tegra/libnvrm.so
lib, /usr/lib/aarch64-linux-gnu/tegra/libnvos.so
lib, /usr/lib/aarch64-linux-gnu/tegra/libnvidia-fatbinaryloader.so.32.7.6
lib, /usr/lib/aarch64-linux-gnu/tegra/libnvtvmr.so
dir, /usr/lib/aarch64-linux-gnu/tegra-egl
lib, /usr/lib/aarch64-linux-gnu/tegra-egl/libEGL_nvidia.so.0
lib, /usr/lib/aarch64-linux-gnu/tegra-egl/ld.so.conf
lib, /usr/share/glvnd/egl_vendor.d/10_nvidia.json
lib, /lib/firmware/tegra21x/nvhost_nvdec020_ns.fw
lib, /usr/sbin/nvargus-daemon
";

/// JetPack 5.1 (r35) `l4t.csv`, the Xavier's.
const XAVIER_L4T: &str = "\
dev, /dev/fb0
dev, /dev/fb1
dev, /dev/host1x
dev, /dev/nvgpu/igpu0/as
dev, /dev/nvgpu/igpu0/channel
dev, /dev/nvgpu/igpu0/ctrl
dev, /dev/nvhost-as-gpu
dev, /dev/nvhost-ctrl
dev, /dev/nvhost-ctrl-gpu
dev, /dev/nvhost-ctrl-nvdla0
dev, /dev/nvhost-ctrl-nvdla1
dev, /dev/nvhost-dbg-gpu
dev, /dev/nvhost-gpu
dev, /dev/nvhost-nvdec
dev, /dev/nvhost-nvdla0
dev, /dev/nvhost-nvdla1
dev, /dev/nvhost-prof-gpu
dev, /dev/nvhost-vic
dev, /dev/nvidiactl
dev, /dev/nvmap
dev, /dev/tegra_dc_0
dev, /dev/tegra_dc_1
dev, /dev/tegra_dc_ctrl
dir, /lib/firmware/tegra19x
lib, /lib/firmware/tegra19x/nvhost_nvdec040_ns.fw
lib, /lib/firmware/tegra19x/nvhost_nvdec040_ns.fw
lib, /lib/firmware/tegra23x/nvhost_nvdec050_desc_prod.bin
sym, /usr/lib/aarch64-linux-gnu/libv4l2.so.0
sym, /usr/lib/aarch64-linux-gnu/tegra/libv4l2.so.0
lib, /usr/lib/aarch64-linux-gnu/tegra/libnvv4l2.so
lib, /usr/lib/aarch64-linux-gnu/tegra/weston/desktop-shell.so
lib, /usr/lib/aarch64-linux-gnu/tegra/weston/weston
lib, /usr/lib/aarch64-linux-gnu/tegra/nvidia_icd.json
lib, /usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1.1
sym, /usr/lib/aarch64-linux-gnu/tegra/libcuda.so
sym, /usr/lib/aarch64-linux-gnu/libcuda.so
lib, /usr/lib/aarch64-linux-gnu/tegra/libnvrm_gpu.so
lib, /usr/lib/aarch64-linux-gnu/tegra/libnvos.so
lib, /usr/lib/aarch64-linux-gnu/tegra-egl/libEGL_nvidia.so.0
lib, /usr/share/glvnd/egl_vendor.d/10-nvidia.json
";

/// meta-tegra's `devices.csv` up to `nvidia-modeset`, the same from r36.4 (branch walnascar)
/// to r39.2 (master); the releases differ only in the nodes that follow.
const DEVICES_HEAD: &str = "\
dev, /dev/dri/card*
dev, /dev/dri/renderD*
dir, /dev/dri/by-path
dev, /dev/fb0
dev, /dev/fb1
dev, /dev/host1x-fence
dev, /dev/nvhost-as-gpu
dev, /dev/nvhost-ctrl-gpu
dev, /dev/nvhost-ctrl-nvdla0
dev, /dev/nvhost-ctrl-nvdla1
dev, /dev/nvhost-ctrl-pva0
dev, /dev/nvhost-ctxsw-gpu
dev, /dev/nvhost-dbg-gpu
dev, /dev/nvhost-gpu
dev, /dev/nvhost-nvsched-gpu
dev, /dev/nvhost-power-gpu
dev, /dev/nvhost-prof-ctx-gpu
dev, /dev/nvhost-prof-dev-gpu
dev, /dev/nvhost-prof-gpu
dev, /dev/nvhost-sched-gpu
dev, /dev/nvhost-tsg-gpu
dev, /dev/nvgpu/igpu0/as
dev, /dev/nvgpu/igpu0/channel
dev, /dev/nvgpu/igpu0/ctrl
dev, /dev/nvgpu/igpu0/ctxsw
dev, /dev/nvgpu/igpu0/dbg
dev, /dev/nvgpu/igpu0/nvsched
dev, /dev/nvgpu/igpu0/power
dev, /dev/nvgpu/igpu0/prof
dev, /dev/nvgpu/igpu0/prof-ctx
dev, /dev/nvgpu/igpu0/prof-dev
dev, /dev/nvgpu/igpu0/sched
dev, /dev/nvgpu/igpu0/tsg
dev, /dev/nvidia-modeset
";

/// The end of every release's `devices.csv`.
const DEVICES_TAIL: &str = "\
dev, /dev/nvidiactl
dev, /dev/nvmap
dev, /dev/nvsciipc
dev, /dev/v4l2-nvdec
dev, /dev/v4l2-nvenc
";

/// meta-tegra's `devices.csv` of an L4T major release, as it is: r36.4 names `nvidia0`; r38.2
/// (branch master-l4t-r38.2.x, Thor's: the Orin-era nvgpu and nvhost nodes, which a Thor does
/// not have, and no UVM nodes) adds `nvidia1`; r39.2 (master) adds the UVM nodes.
fn devices_csv(l4t_major: u32) -> String {
    let middle = match l4t_major {
        36 => "dev, /dev/nvidia0\n",
        38 => "dev, /dev/nvidia0\ndev, /dev/nvidia1\n",
        _ => "dev, /dev/nvidia-uvm\ndev, /dev/nvidia-uvm-tools\ndev, /dev/nvidia0\ndev, /dev/nvidia1\n",
    };
    format!("{DEVICES_HEAD}{middle}{DEVICES_TAIL}")
}

/// The kinds of line of JetPack 6/7's `drivers.csv`, with JetPack's paths; `{version}` is
/// the release's driver version.
const DRIVERS: &str = "\
lib, /usr/lib/aarch64-linux-gnu/libv4l2.so.0
lib, /usr/lib/aarch64-linux-gnu/nvidia/weston/desktop-shell.so
lib, /usr/lib/aarch64-linux-gnu/nvidia/weston/libweston-6.so.0
lib, /usr/lib/aarch64-linux-gnu/nvidia/weston/weston
lib, /usr/lib/aarch64-linux-gnu/gstreamer-1.0/libgstnvvidconv.so
lib, /usr/lib/aarch64-linux-gnu/gstreamer-1.0/nvgstipctestapp-1.0_README.txt
lib, /etc/vulkansc/icd.d/nvidia_icd_vksc.json
lib, /usr/lib/aarch64-linux-gnu/nvidia/ld.so.conf
lib, /usr/lib/aarch64-linux-gnu/nvidia/libGLX_nvidia.so.0
lib, /usr/lib/aarch64-linux-gnu/nvidia/libcuda.so.1.1
lib, /usr/lib/aarch64-linux-gnu/nvidia/libnvidia-ml.so.1
lib, /usr/lib/aarch64-linux-gnu/nvidia/libnvidia-ptxjitcompiler.so.{version}
lib, /usr/lib/aarch64-linux-gnu/nvidia/libnvos.so
lib, /usr/lib/aarch64-linux-gnu/nvidia/libnvrm_gpu.so
lib, /usr/lib/aarch64-linux-gnu/nvidia/libnvrm_mem.so
lib, /usr/lib/aarch64-linux-gnu/nvidia/libnvv4l2.so
lib, /usr/lib/aarch64-linux-gnu/nvidia/nvidia_icd.json
lib, /usr/lib/aarch64-linux-gnu/tegra-egl/ld.so.conf
lib, /usr/lib/aarch64-linux-gnu/tegra-egl/libEGL_nvidia.so.0
lib, /usr/share/glvnd/egl_vendor.d/10-nvidia.json
sym, /etc/vulkan/icd.d/nvidia_icd.json
sym, /usr/lib/aarch64-linux-gnu/nvidia/libcuda.so
sym, /usr/lib/aarch64-linux-gnu/libcuda.so
sym, /usr/lib/aarch64-linux-gnu/libv4l2.so.0.0.999999
sym, /usr/lib/aarch64-linux-gnu/nvidia/libcuda.so.1
sym, /usr/lib/aarch64-linux-gnu/nvidia/libnvidia-ptxjitcompiler.so.1
sym, /usr/lib/aarch64-linux-gnu/nvidia/libv4l2.so.0
sym, /usr/lib/aarch64-linux-gnu/tegra
sym, /usr/share/glvnd/egl_vendor.d/10_nvidia.json
lib, /lib/firmware/tegra19x/nvhost_nvdec040_ns.fw
lib, /lib/firmware/tegra19x/nvhost_nvdec040_ns.fw
lib, /lib/firmware/tegra23x/nvhost_nvdec050_desc_prod.bin
lib, /usr/sbin/nvidia-smi
";

/// The JetPack 5 era `l4t.csv` an upgraded JetPack 6 Orin keeps: paths through `tegra/`,
/// partly the same files as drivers.csv's.
const ORIN_R36_OLD_L4T: &str = "\
lib, /usr/lib/aarch64-linux-gnu/tegra/libnvv4l2.so
sym, /usr/lib/aarch64-linux-gnu/tegra/libv4l2.so.0
lib, /usr/lib/aarch64-linux-gnu/tegra/libcuda.so.1.1
lib, /usr/lib/aarch64-linux-gnu/nvidia/libcuda.so.1.1
";

impl Board {
    /// The board's CSV files (name, contents), as its release installs them.
    pub fn csv_files(self) -> Vec<(&'static str, String)> {
        let drivers = || DRIVERS.replace("{version}", self.driver_version());
        match self {
            Board::Nano => vec![("l4t.csv", NANO_L4T.to_string())],
            Board::Xavier => vec![("l4t.csv", XAVIER_L4T.to_string())],
            Board::Orin => vec![
                ("devices.csv", devices_csv(36)),
                ("drivers.csv", drivers()),
                ("l4t.csv", ORIN_R36_OLD_L4T.to_string()),
            ],
            Board::OrinR39 | Board::Thor => vec![
                ("devices.csv", devices_csv(self.l4t_major())),
                ("drivers.csv", drivers()),
            ],
        }
    }

    /// Version suffix of the release's versioned driver libraries (JetPack 6.2: 540.4.0,
    /// meta-tegra's drivers.csv; JetPack 7: the r580 and r595 branches, unverified builds).
    pub fn driver_version(self) -> &'static str {
        match self {
            Board::Nano => "32.7.6",
            Board::Xavier => "35.4.1",
            Board::Orin => "540.4.0",
            Board::Thor => "580.00",
            Board::OrinR39 => "595.00",
        }
    }

    /// The directory holding the release's user-space GPU libraries: `tegra` up to JetPack 5,
    /// `nvidia` (with `tegra` a link to it) from JetPack 6.
    pub fn lib_dir(self) -> String {
        match self {
            Board::Nano | Board::Xavier => format!("{LIB}/tegra"),
            _ => format!("{LIB}/nvidia"),
        }
    }
}

/// One thing [`layout`] puts in a fake root: a file with its contents, or a symlink with
/// exactly `target` as its content. Host paths, absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    File { path: String, contents: String },
    Link { path: String, target: String },
}

/// The board's CSV files and the files they name that the board has, in the order they are
/// made (`crate::host` writes them into a root).
pub(crate) fn layout(board: Board) -> Vec<Entry> {
    let mut out = Layout(Vec::new());
    for (name, text) in board.csv_files() {
        out.0.push(Entry::File {
            path: format!("/etc/nvidia-container-runtime/host-files-for-container.d/{name}"),
            contents: text,
        });
    }
    let libs = board.lib_dir();
    // libcuda and its links: `libcuda.so` next to the other libraries reaches the library
    // through the `tegra` directory (a link to `nvidia` from JetPack 6).
    out.file(&format!("{libs}/libcuda.so.1.1"));
    out.link(&format!("{libs}/libcuda.so"), "libcuda.so.1.1");
    out.link(&format!("{LIB}/libcuda.so"), "tegra/libcuda.so");
    for lib in ["libnvrm_gpu.so", "libnvos.so", "libnvv4l2.so"] {
        out.file(&format!("{libs}/{lib}"));
    }
    out.link(&format!("{libs}/libv4l2.so.0"), "libnvv4l2.so");
    out.file(&format!("{LIB}/tegra-egl/libEGL_nvidia.so.0"));
    out.file(&format!("{LIB}/tegra-egl/ld.so.conf"));
    match board {
        Board::Nano => {
            out.file(&format!("{libs}/libnvrm.so"));
            out.file("/usr/share/glvnd/egl_vendor.d/10_nvidia.json");
            out.file("/lib/firmware/tegra21x/nvhost_nvdec020_ns.fw");
            out.file("/usr/sbin/nvargus-daemon");
        }
        Board::Xavier => {
            out.file("/lib/firmware/tegra19x/nvhost_nvdec040_ns.fw");
            out.file(&format!("{libs}/weston/desktop-shell.so"));
            out.file(&format!("{libs}/weston/weston"));
            out.file(&format!("{libs}/nvidia_icd.json"));
            out.file("/usr/share/glvnd/egl_vendor.d/10-nvidia.json");
            out.link(&format!("{LIB}/libv4l2.so.0"), "tegra/libv4l2.so.0");
        }
        Board::Orin | Board::OrinR39 | Board::Thor => {
            out.link(&format!("{LIB}/tegra"), "nvidia");
            out.link(&format!("{libs}/libcuda.so.1"), "libcuda.so.1.1");
            let version = board.driver_version();
            out.file(&format!("{libs}/libnvidia-ptxjitcompiler.so.{version}"));
            out.link(
                &format!("{libs}/libnvidia-ptxjitcompiler.so.1"),
                &format!("libnvidia-ptxjitcompiler.so.{version}"),
            );
            out.file(&format!("{libs}/libnvrm_mem.so"));
            out.file(&format!("{libs}/libGLX_nvidia.so.0"));
            out.file(&format!("{libs}/ld.so.conf"));
            out.file(&format!("{libs}/nvidia_icd.json"));
            out.file(&format!("{libs}/weston/desktop-shell.so"));
            out.file(&format!("{libs}/weston/weston"));
            out.file(&format!("{LIB}/gstreamer-1.0/libgstnvvidconv.so"));
            out.file(&format!(
                "{LIB}/gstreamer-1.0/nvgstipctestapp-1.0_README.txt"
            ));
            // An absolute link through the `tegra` link.
            out.link(
                "/etc/vulkan/icd.d/nvidia_icd.json",
                &format!("{LIB}/tegra/nvidia_icd.json"),
            );
            out.file("/usr/share/glvnd/egl_vendor.d/10-nvidia.json");
            out.file("/usr/sbin/nvidia-smi");
            if board != Board::Thor {
                out.file("/lib/firmware/tegra23x/nvhost_nvdec050_desc_prod.bin");
            }
            // The card's link in `by-path`, as udev makes it.
            out.link(
                "/dev/dri/by-path/platform-13800000.display-card",
                "../card0",
            );
        }
    }
    out.0
}

struct Layout(Vec<Entry>);

impl Layout {
    /// A library or other file the lists name (its contents do not matter).
    fn file(&mut self, path: &str) {
        self.0.push(Entry::File {
            path: path.to_string(),
            contents: "ELF".to_string(),
        });
    }

    fn link(&mut self, path: &str, target: &str) {
        self.0.push(Entry::Link {
            path: path.to_string(),
            target: target.to_string(),
        });
    }
}
