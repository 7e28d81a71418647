// The fields of each struct the node description holds, listed once for
// writing and reading alike (description.cpp's Writer and Reader), so the two
// cannot disagree. Private to description.cpp; its order is the file format's:
// a change here is a new schema (kSchema there).
#pragma once

#include <concepts>
#include <type_traits>

#include "gpubind/node/description.hpp"
#include "gpubind/node/families.hpp"

namespace gpubind::node::description_fields {

template <class Io, class T>
requires std::same_as<std::remove_const_t<T>, DeviceNode>
void fields(Io& io, T& n) {
    io(n.path, n.host_path, n.major, n.minor, n.mode);
}

template <class Io, class T>
requires std::same_as<std::remove_const_t<T>, MigDevice>
void fields(Io& io, T& m) {
    io(m.gpu_index, m.index, m.gi, m.ci, m.uuid, m.gi_access, m.ci_access, m.gi_cap, m.ci_cap);
}

template <class Io, class T>
requires std::same_as<std::remove_const_t<T>, Gpu>
void fields(Io& io, T& g) {
    io(g.index, g.minor, g.model, g.uuid, g.pci_bus_id, g.vbios, g.bus_type, g.excluded, g.proc_dir,
       g.node, g.mig, g.brand, g.compute_capability, g.memory, g.place, g.nvlink);
}

template <class Io, class T>
requires std::same_as<std::remove_const_t<T>, NvlinkLink>
void fields(Io& io, T& l) {
    io(l.link, l.remote_type, l.remote_bus_id);
}

template <class Io, class T>
requires std::same_as<std::remove_const_t<T>, GpuNvlink>
void fields(Io& io, T& n) {
    io(n.unknown, n.links, n.p2p_known, n.p2p_ok, n.fabric_cluster, n.fabric_clique);
}

template <class Io, class T>
requires std::same_as<std::remove_const_t<T>, PciPlace>
void fields(Io& io, T& p) {
    io(p.bridges, p.numa_node, p.cpulist);
}

template <class Io, class T>
requires std::same_as<std::remove_const_t<T>, FamilyDevice>
void fields(Io& io, T& d) {
    io(d.name, d.pci_bus_id, d.place, d.nodes, d.extras, d.links);
}

template <class Io, class T>
requires std::same_as<std::remove_const_t<T>, FamilyNodes>
void fields(Io& io, T& f) {
    io(f.name, f.devices, f.shared, f.files);
}

template <class Io, class T>
requires std::same_as<std::remove_const_t<T>, DriverFile>
void fields(Io& io, T& f) {
    io(f.kind, f.name, f.host_path, f.real_path, f.caps, f.compat32);
}

template <class Io, class T>
requires std::same_as<std::remove_const_t<T>, Node>
void fields(Io& io, T& n) {
    io(n.roots.driver, n.roots.dev, n.roots.proc, n.roots.sys, n.driver_version, n.cuda_version,
       n.gpus, n.control, n.mig_control, n.imex_channels, n.families, n.files, n.warnings,
       n.memory_limits, n.memory_limits_why);
}

template <class Io, class T>
requires std::same_as<std::remove_const_t<T>, ProcFiles>
void fields(Io& io, T& p) {
    io(p.version, p.params, p.information);
}

template <class Io, class T>
requires std::same_as<std::remove_const_t<T>, NvmlRecord>
void fields(Io& io, T& r) {
    io(r.status, r.asked_at, r.took_ms, r.error);
}

// What the file holds of the knowledge (not what this call did).
template <class Io, class T>
requires std::same_as<std::remove_const_t<T>, NodeKnowledge>
void fields(Io& io, T& k) {
    io(k.computed_at, k.fingerprint, k.nvml, k.node, k.proc);
}

}  // namespace gpubind::node::description_fields
