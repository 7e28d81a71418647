// doctor: what gpubind keeps for the driver state — the node description
// and the node's CDI specs — judged against the node as it is now. Read only:
// the description is loaded without being rewritten, the specs compared with
// what `gpubind cdi refresh` would write.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gpubind/cdi/cdi.hpp"
#include "gpubind/doctor/doctor.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/util/file.hpp"

namespace gpubind::doctor {

StateFacts gather_state(const config::Config& config) {
    StateFacts f;
    f.description_path = node::description_path(config).string();
    node::NodeKnowledge known;
    try {
        node::LoadOptions load;
        load.write = false;
        known = node::load_node(config, load);
    } catch (const std::exception& e) {
        f.node_error = e.what();
        return f;
    }
    if (known.recomputed) f.description_stale = known.why;
    for (const cdi::SpecFile& want : cdi::wanted_specs(known.node, config)) {
        StateFacts::Spec s;
        s.path = want.path.string();
        s.file = stat_path(want.path);
        s.wanted = want.content.has_value();
        if (!s.file.exists()) {
            s.state = s.wanted ? "missing" : "current";
        } else if (!s.wanted) {
            s.state = "left over";
        } else if (s.file.type != FileFact::Type::Regular) {
            s.state = "stale";
        } else {
            s.state = util::read_file(want.path, cdi::kMaxSpecFileSize) == *want.content ? "current"
                                                                                         : "stale";
        }
        f.cdi.push_back(std::move(s));
    }
    return f;
}

std::vector<Check> check_state(const StateFacts& f) {
    Check d{"gpubind", "node-description", Verdict::Ok, "", {f.description_path}, ""};
    if (!f.node_error.empty()) {
        d.verdict = Verdict::Problem;
        d.summary = "the node cannot be learned: " + f.node_error;
        d.fix = "see the node checks";
        return {std::move(d)};
    }
    if (f.description_stale.empty()) {
        d.summary = "current for this driver state";
    } else {
        // The next start rewrites it; only a start pays for that (discovery).
        d.verdict = Verdict::Warning;
        d.summary = "not current: " + f.description_stale;
        d.fix = "`gpubind info --refresh` writes it now (the next container start would)";
    }

    Check c{"gpubind", "cdi-spec", Verdict::Ok, "", {}, ""};
    std::vector<std::string> missing, stale;
    for (const auto& s : f.cdi) {
        c.evidence.push_back(s.path + ": " + s.state + " (" + describe(s.file) + ")");
        if (s.state == "missing") missing.push_back(s.path);
        if (s.state == "stale" || s.state == "left over") stale.push_back(s.path);
    }
    if (!stale.empty()) {
        // Engines apply these themselves: a stale spec breaks every CDI container.
        c.verdict = Verdict::Problem;
        c.summary = fmt::format("CDI spec not what the node has now: {}", fmt::join(stale, ", "));
        c.fix = "`gpubind cdi refresh` (and enable gpubind-cdi.service so boot does it)";
    } else if (!missing.empty()) {
        c.summary =
            fmt::format("no CDI spec ({}): CDI not in use on this node", fmt::join(missing, ", "));
        c.fix = "";
    } else {
        c.summary = "current for this driver state";
    }
    return {std::move(d), std::move(c)};
}

}  // namespace gpubind::doctor
