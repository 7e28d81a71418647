// Choosing GPUs: see node/placement.hpp.
#include "gpubind/node/placement.hpp"

#include <algorithm>
#include <cerrno>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gpubind/util/error.hpp"

namespace gpubind::node {

namespace {

// Beyond this many subsets scored, the search gives up (no node has that
// many GPUs in one NVLink domain: 16 GPUs, 8 of them, are 12,870 subsets).
constexpr unsigned long kMaxSubsets = 5'000'000;

std::string list(const std::vector<unsigned>& gpus) {
    return fmt::format("{}", fmt::join(gpus, ","));
}

struct Candidate {
    PlaceScore score;
    std::vector<unsigned> gpus;
};

class Search {
  public:
    Search(const PlaceTopology& t, NvlinkNeed need, unsigned count)
        : t_(t), need_(need), k_(count) {}

    void run(std::vector<unsigned> chosen, const std::vector<unsigned>& candidates) {
        candidates_ = candidates;
        chosen_ = std::move(chosen);
        if (need_ == NvlinkNeed::Required && !all_linked(chosen_)) return;
        walk(0);
    }
    const std::optional<Candidate>& best() const { return best_; }
    const std::optional<Candidate>& second() const { return second_; }

  private:
    bool linked_to_all(unsigned g, const std::vector<unsigned>& set) const {
        return std::all_of(set.begin(), set.end(),
                           [&](unsigned o) { return t_.nvlinks[g][o] > 0; });
    }
    bool all_linked(const std::vector<unsigned>& set) const {
        for (std::size_t i = 0; i < set.size(); ++i)
            for (std::size_t j = i + 1; j < set.size(); ++j)
                if (t_.nvlinks[set[i]][set[j]] == 0) return false;
        return true;
    }

    void walk(std::size_t from) {
        if (chosen_.size() == k_) {
            offer();
            return;
        }
        const std::size_t missing = k_ - chosen_.size();
        for (std::size_t i = from; i + missing <= candidates_.size(); ++i) {
            const unsigned g = candidates_[i];
            if (need_ == NvlinkNeed::Required && !linked_to_all(g, chosen_)) continue;
            chosen_.push_back(g);
            walk(i + 1);
            chosen_.pop_back();
        }
    }

    void offer() {
        if (++scored_ > kMaxSubsets)
            throw util::Error(E2BIG, "place GPUs", "",
                              fmt::format("more than {} subsets to compare", kMaxSubsets));
        Candidate c{{}, chosen_};
        std::sort(c.gpus.begin(), c.gpus.end());
        c.score = score_of(t_, c.gpus, need_);
        if (!best_ || better(c.score, c.gpus, best_->score, best_->gpus)) {
            second_ = std::move(best_);
            best_ = std::move(c);
        } else if (!second_ || better(c.score, c.gpus, second_->score, second_->gpus)) {
            second_ = std::move(c);
        }
    }

    const PlaceTopology& t_;
    NvlinkNeed need_;
    unsigned k_;
    std::vector<unsigned> candidates_, chosen_;
    std::optional<Candidate> best_, second_;
    unsigned long scored_ = 0;
};

std::string describe(const Candidate& c, NvlinkNeed need) {
    std::string s = fmt::format("GPUs {}: ", list(c.gpus));
    if (need != NvlinkNeed::Ignore)
        s += fmt::format("{} NVLinks over {} of {} pairs, ", c.score.nvlink, c.score.linked_pairs,
                         c.score.pairs);
    return s + fmt::format("PCIe distance {}, {} NUMA node{}", c.score.pcie, c.score.numa_nodes,
                           c.score.numa_nodes == 1 ? "" : "s");
}

// What `b` (the runner-up) lost on against `a`.
std::string lost_on(const Candidate& a, const Candidate& b) {
    if (a.score.nvlink != b.score.nvlink) return fmt::format("fewer NVLinks ({})", b.score.nvlink);
    if (a.score.pcie != b.score.pcie)
        return fmt::format("a longer PCIe distance ({})", b.score.pcie);
    if (a.score.numa_nodes != b.score.numa_nodes)
        return fmt::format("more NUMA nodes ({})", b.score.numa_nodes);
    return "higher indices";
}

}  // namespace

PlaceTopology place_topology(const std::vector<Gpu>& gpus, const NvlinkGraph& graph) {
    PlaceTopology t;
    const std::size_t n = gpus.size();
    t.nvlinks = graph.links;
    t.pcie.assign(n, std::vector<unsigned>(n, 0));
    for (std::size_t a = 0; a < n; ++a) {
        t.numa.push_back(gpus[a].place ? gpus[a].place->numa_node : -1);
        for (std::size_t b = 0; b < n; ++b)
            if (a != b) t.pcie[a][b] = pcie_rank(pcie_path(gpus[a].place, gpus[b].place));
    }
    return t;
}

PlaceScore score_of(const PlaceTopology& t, const std::vector<unsigned>& gpus, NvlinkNeed need) {
    PlaceScore s;
    std::set<int> numa;
    for (std::size_t i = 0; i < gpus.size(); ++i) {
        numa.insert(t.numa[gpus[i]]);
        for (std::size_t j = i + 1; j < gpus.size(); ++j) {
            const unsigned links = t.nvlinks[gpus[i]][gpus[j]];
            ++s.pairs;
            if (links > 0) ++s.linked_pairs;
            if (need != NvlinkNeed::Ignore) s.nvlink += links;
            s.pcie += t.pcie[gpus[i]][gpus[j]];
        }
    }
    s.numa_nodes = static_cast<unsigned>(numa.size());
    return s;
}

bool better(const PlaceScore& a, const std::vector<unsigned>& a_gpus, const PlaceScore& b,
            const std::vector<unsigned>& b_gpus) {
    if (a.nvlink != b.nvlink) return a.nvlink > b.nvlink;
    if (a.pcie != b.pcie) return a.pcie < b.pcie;
    if (a.numa_nodes != b.numa_nodes) return a.numa_nodes < b.numa_nodes;
    return a_gpus < b_gpus;
}

Placement place_gpus(const PlaceTopology& t, const PlaceRequest& r) {
    const auto n = static_cast<unsigned>(t.numa.size());
    std::set<unsigned> free;
    if (r.from.empty())
        for (unsigned i = 0; i < n; ++i) free.insert(i);
    for (unsigned g : r.from) {
        if (g >= n)
            util::throw_invalid("place GPUs", "", fmt::format("no GPU {} (the node has {})", g, n));
        free.insert(g);
    }
    std::set<unsigned> must;
    for (unsigned g : r.must_include) {
        if (g >= n)
            util::throw_invalid("place GPUs", "", fmt::format("no GPU {} (the node has {})", g, n));
        must.insert(g);
        free.insert(g);
    }
    if (r.count == 0) util::throw_invalid("place GPUs", "", "asked for 0 GPUs");
    if (r.count > free.size())
        util::throw_invalid("place GPUs", "",
                            fmt::format("asked for {} GPUs of {} free", r.count, free.size()));
    if (must.size() > r.count)
        util::throw_invalid("place GPUs", "",
                            fmt::format("{} GPUs must be included but only {} are asked for",
                                        must.size(), r.count));
    std::vector<unsigned> candidates;
    for (unsigned g : free)
        if (!must.count(g)) candidates.push_back(g);
    const std::vector<unsigned> chosen(must.begin(), must.end());

    Search search(t, r.nvlink, r.count);
    search.run(chosen, candidates);
    Placement p;
    if (!search.best()) {
        // Required and no linked set: the best there is, under Preferred.
        Search any(t, NvlinkNeed::Preferred, r.count);
        any.run(chosen, candidates);
        p.satisfied = false;
        p.gpus = any.best()->gpus;
        p.score = any.best()->score;
        p.why =
            fmt::format("no {} of the free GPUs are all linked by NVLink; the best there is: {}",
                        r.count, describe(*any.best(), NvlinkNeed::Preferred));
        return p;
    }
    p.gpus = search.best()->gpus;
    p.score = search.best()->score;
    p.why = describe(*search.best(), r.nvlink);
    if (search.second())
        p.why += fmt::format("; the next best, GPUs {}, has {}", list(search.second()->gpus),
                             lost_on(*search.best(), *search.second()));
    else
        p.why += "; the only choice";
    return p;
}

}  // namespace gpubind::node
