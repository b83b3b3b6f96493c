//! Thermal zones and their trip points (Linux `Documentation/driver-api/thermal/sysfs-api.rst`:
//! `thermal_zoneN/type`, `temp` and `trip_point_M_temp` / `trip_point_M_type`, temperatures in
//! millidegrees Celsius). On a Jetson the zones carry the SoC's names (`gpu-thermal`,
//! `tj-thermal` on Orin); a zone at or above a passive trip point is being throttled by the
//! kernel.

use std::path::Path;

use edgegpu_platform::host::THERMAL_CLASS;

use crate::gpu::under_root;

/// One trip point of a zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trip {
    /// `passive` (the kernel lowers clocks), `active` (a fan), `hot`, `critical` (shutdown).
    pub kind: String,
    pub millicelsius: i64,
}

/// One thermal zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThermalZone {
    /// N of `thermal_zoneN`.
    pub index: u32,
    /// `type` (`gpu-thermal`).
    pub name: String,
    pub millicelsius: Option<i64>,
    /// Lowest first.
    pub trips: Vec<Trip>,
}

impl ThermalZone {
    /// The lowest trip point at or above the zone's temperature: the next limit it meets.
    pub fn next_trip(&self) -> Option<&Trip> {
        let now = self.millicelsius?;
        self.trips.iter().find(|t| t.millicelsius >= now)
    }

    /// A passive (clock-lowering) trip point the zone has reached.
    pub fn throttling(&self) -> bool {
        let Some(now) = self.millicelsius else {
            return false;
        };
        self.trips
            .iter()
            .any(|t| t.kind == "passive" && t.millicelsius > 0 && now >= t.millicelsius)
    }

    /// The zone's `temp` file under `root`: the one file that changes (the type and the
    /// trip points are the board's and stay).
    pub fn temperature_file(&self, root: &Path) -> std::path::PathBuf {
        under_root(root, THERMAL_CLASS).join(format!("thermal_zone{}/temp", self.index))
    }

    /// The zone with its temperature read again (`None` when it cannot be read).
    pub fn reread(&self, root: &Path) -> ThermalZone {
        ThermalZone {
            millicelsius: std::fs::read_to_string(self.temperature_file(root))
                .ok()
                .and_then(|t| t.trim().parse().ok()),
            ..self.clone()
        }
    }
}

/// The host's thermal zones, in zone order. Zones whose files cannot be read are skipped.
pub fn zones(root: &Path) -> Vec<ThermalZone> {
    let Ok(entries) = std::fs::read_dir(under_root(root, THERMAL_CLASS)) else {
        return Vec::new();
    };
    let mut dirs: Vec<(u32, std::path::PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let n = e
                .file_name()
                .to_str()?
                .strip_prefix("thermal_zone")?
                .parse()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    dirs.sort();
    dirs.into_iter()
        .filter_map(|(index, dir)| {
            let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
            let name = read("type")?.trim().to_string();
            let millicelsius = read("temp").and_then(|t| t.trim().parse().ok());
            let mut trips: Vec<Trip> = (0..)
                .map_while(|m| {
                    let temp = read(&format!("trip_point_{m}_temp"))?;
                    let kind = read(&format!("trip_point_{m}_type")).unwrap_or_default();
                    Some((temp, kind))
                })
                .filter_map(|(temp, kind)| {
                    Some(Trip {
                        kind: kind.trim().to_string(),
                        millicelsius: temp.trim().parse().ok()?,
                    })
                })
                .collect();
            trips.sort_by_key(|t| t.millicelsius);
            Some(ThermalZone {
                index,
                name,
                millicelsius,
                trips,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(root: &Path, n: u32, name: &str, temp: &str, trips: &[(&str, &str)]) {
        let dir = root.join(format!("sys/class/thermal/thermal_zone{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("type"), format!("{name}\n")).unwrap();
        std::fs::write(dir.join("temp"), format!("{temp}\n")).unwrap();
        for (m, (kind, t)) in trips.iter().enumerate() {
            std::fs::write(dir.join(format!("trip_point_{m}_type")), kind).unwrap();
            std::fs::write(dir.join(format!("trip_point_{m}_temp")), t).unwrap();
        }
    }

    #[test]
    fn zones_trips_and_throttling() {
        let root = tempfile::tempdir().unwrap();
        zone(root.path(), 10, "tj-thermal", "48000", &[]);
        zone(
            root.path(),
            1,
            "gpu-thermal",
            "99500",
            &[("critical", "105000"), ("passive", "99000")],
        );
        std::fs::create_dir_all(root.path().join("sys/class/thermal/cooling_device0")).unwrap();
        let found = zones(root.path());
        assert_eq!(
            found.iter().map(|z| z.name.as_str()).collect::<Vec<_>>(),
            ["gpu-thermal", "tj-thermal"]
        );
        let gpu = &found[0];
        assert_eq!(gpu.trips[0].kind, "passive", "lowest first");
        assert!(gpu.throttling());
        assert_eq!(gpu.next_trip().map(|t| t.millicelsius), Some(105_000));
        assert!(!found[1].throttling());
        assert_eq!(found[1].next_trip(), None);
        // A re-read changes the temperature alone.
        zone(root.path(), 1, "gpu-thermal", "60000", &[]);
        let cooler = gpu.reread(root.path());
        assert_eq!((cooler.index, cooler.millicelsius), (1, Some(60_000)));
        assert_eq!(cooler.trips, gpu.trips);
        assert!(!cooler.throttling());
        assert!(zones(&root.path().join("none")).is_empty());
    }
}
