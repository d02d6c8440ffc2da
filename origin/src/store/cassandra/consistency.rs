//! Whether reads see writes in Cassandra: a read sees an acknowledged write only if the
//! replicas that acknowledged the write and those that answer the read overlap, i.e.
//! R + W > RF. bloomgate reads and writes at one configured level, so the level must overlap
//! itself for the keyspace's replication, or a "maybe" could read a replica that lacks an
//! acknowledged key and answer "not seen". Checked at start-up against the keyspace as it is,
//! and again before every read and write against the driver's schema metadata, so an
//! `ALTER KEYSPACE` that raises the replication factor past the level stops reads and writes
//! (503, the reason logged) instead of letting a read miss a write.

use scylla::cluster::metadata::Strategy;
use scylla::statement::Consistency;
use std::collections::HashMap;

/// A keyspace's replication: replicas per data centre (one unnamed entry for SimpleStrategy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replication {
    /// (data centre, replicas); SimpleStrategy has one entry named "".
    pub replicas: Vec<(String, u32)>,
}

impl Replication {
    /// Reads `system_schema.keyspaces.replication`. Transient replication ("3/1") counts the
    /// full replicas only.
    pub fn from_schema(map: &HashMap<String, String>) -> Result<Replication, String> {
        let class = map.get("class").map(String::as_str).unwrap_or_default();
        let count = |v: &str| -> Result<u32, String> {
            let full = v.split('/').next().unwrap_or(v).trim();
            full.parse().map_err(|_| format!("replication factor {v:?} is not a number"))
        };
        if class.ends_with("SimpleStrategy") {
            let rf = map.get("replication_factor").ok_or("SimpleStrategy without replication_factor")?;
            return Ok(Replication { replicas: vec![(String::new(), count(rf)?)] });
        }
        let replicas = map
            .iter()
            .filter(|(k, _)| k.as_str() != "class" && k.as_str() != "replication_factor")
            .map(|(dc, v)| Ok((dc.clone(), count(v)?)))
            .collect::<Result<Vec<_>, String>>()?;
        if replicas.is_empty() {
            return Err(format!("replication class {class:?} names no data centres"));
        }
        Ok(Replication { replicas })
    }

    /// The replication in the driver's schema metadata (refreshed by the driver on every schema
    /// change event, and at its metadata refresh interval).
    pub fn from_driver(strategy: &Strategy) -> Result<Replication, String> {
        let count = |n: usize| u32::try_from(n).map_err(|_| format!("replication factor {n} is out of range"));
        match strategy {
            Strategy::SimpleStrategy { replication_factor } => {
                Ok(Replication { replicas: vec![(String::new(), count(*replication_factor)?)] })
            }
            Strategy::NetworkTopologyStrategy { datacenter_repfactors } => Ok(Replication {
                replicas: datacenter_repfactors
                    .iter()
                    .map(|(dc, n)| Ok((dc.clone(), count(*n)?)))
                    .collect::<Result<_, String>>()?,
            }),
            Strategy::LocalStrategy => Ok(Replication { replicas: vec![(String::new(), 1)] }),
            // Transient replication ("3/1") and strategies the driver does not parse.
            Strategy::Other { name, data } => {
                let mut map = data.clone();
                map.insert("class".into(), name.clone());
                Replication::from_schema(&map)
            }
            other => Err(format!("replication strategy {other:?} is not known to bloomgate")),
        }
    }

    fn total(&self) -> u32 {
        self.replicas.iter().map(|(_, n)| n).sum()
    }
}

/// Refuses a level at which reads might miss acknowledged writes, saying what to use instead.
pub fn check_overlap(level: Consistency, replication: &Replication) -> Result<(), String> {
    use Consistency::*;
    let total = replication.total();
    let quorum = |n: u32| n / 2 + 1;
    let overlaps = match level {
        One | Two | Three => {
            let acks = match level {
                One => 1,
                Two => 2,
                _ => 3,
            };
            2 * acks > total
        }
        Quorum | All | EachQuorum | Serial => true,
        LocalOne | LocalQuorum | LocalSerial => {
            if replication.replicas.len() > 1 {
                return Err(format!(
                    "cassandra_consistency {level:?} with {} data centres: an origin in one data centre would not see writes acknowledged in another (reads and writes must overlap, R + W > RF). Use quorum, or one keyspace per data centre",
                    replication.replicas.len()
                ));
            }
            let acks = if level == LocalOne { 1 } else { quorum(total) };
            2 * acks > total
        }
        Any => false,
    };
    if overlaps {
        Ok(())
    } else {
        Err(format!(
            "cassandra_consistency {level:?} with replication factor {total}: a read might miss an acknowledged write (reads and writes must overlap, R + W > RF), and bloomgate would answer \"not seen\". Use local_quorum or quorum"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn simple(rf: u32) -> Replication {
        Replication { replicas: vec![(String::new(), rf)] }
    }

    #[test]
    fn one_is_fine_on_a_single_replica_and_refused_on_three() {
        assert!(check_overlap(Consistency::One, &simple(1)).is_ok());
        assert!(check_overlap(Consistency::LocalOne, &simple(1)).is_ok());
        let err = check_overlap(Consistency::One, &simple(3)).unwrap_err();
        assert!(err.contains("R + W > RF") && err.contains("quorum"), "{err}");
        assert!(check_overlap(Consistency::LocalOne, &simple(3)).is_err());
        assert!(check_overlap(Consistency::Two, &simple(3)).is_ok());
    }

    #[test]
    fn quorums_always_overlap_within_one_data_centre() {
        for rf in 1..=7 {
            assert!(check_overlap(Consistency::LocalQuorum, &simple(rf)).is_ok(), "rf {rf}");
            assert!(check_overlap(Consistency::Quorum, &simple(rf)).is_ok(), "rf {rf}");
        }
    }

    #[test]
    fn local_levels_are_refused_across_data_centres() {
        let two = Replication { replicas: vec![("dc1".into(), 3), ("dc2".into(), 3)] };
        assert!(check_overlap(Consistency::LocalQuorum, &two).is_err());
        assert!(check_overlap(Consistency::Quorum, &two).is_ok());
    }

    #[test]
    fn the_schema_map_is_read() {
        let map = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let simple3 = map(&[("class", "org.apache.cassandra.locator.SimpleStrategy"), ("replication_factor", "3")]);
        assert_eq!(Replication::from_schema(&simple3).unwrap(), simple(3));
        let nts = map(&[("class", "org.apache.cassandra.locator.NetworkTopologyStrategy"), ("datacenter1", "3/1")]);
        assert_eq!(Replication::from_schema(&nts).unwrap().replicas, [("datacenter1".to_string(), 3)]);
        assert!(Replication::from_schema(&map(&[("class", "SimpleStrategy")])).is_err());
    }

    #[test]
    fn the_driver_s_metadata_is_read_alike() {
        assert_eq!(Replication::from_driver(&Strategy::SimpleStrategy { replication_factor: 3 }).unwrap(), simple(3));
        let nts = Strategy::NetworkTopologyStrategy { datacenter_repfactors: [("dc1".to_string(), 2)].into() };
        assert_eq!(Replication::from_driver(&nts).unwrap().replicas, [("dc1".to_string(), 2)]);
        assert_eq!(Replication::from_driver(&Strategy::LocalStrategy).unwrap(), simple(1));
        let transient = Strategy::Other {
            name: "org.apache.cassandra.locator.NetworkTopologyStrategy".into(),
            data: [("dc1".to_string(), "3/1".to_string())].into(),
        };
        assert_eq!(Replication::from_driver(&transient).unwrap().replicas, [("dc1".to_string(), 3)]);
    }
}
