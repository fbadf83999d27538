// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @title SwarmCoordinator: the neutral referee of a permissionless GenRL-Swarm.
/// @notice Who is in (one registration per account), which round and stage it is, who earned
/// what, and where new peers join (bootnodes).
///
/// Rewards are honest by construction, not by trust:
/// - the unit is the account (msg.sender): one account = one peer = one voter; the peer id an
///   account registers is only a display label, so nothing can be squatted;
/// - an account reports once per round: its bounded fixed-point scores (the client scales floats
///   by REWARD_SCALE) of the accounts it played with, itself included; an empty report is refused;
/// - the VOTERS on a peer are the accounts that scored someone other than themselves in the
///   round, plus the peer itself when it scored only itself (a report of oneself alone is a vote
///   on oneself, never a NEUTRAL vote on others: Sybils that only self-report never outvote the
///   reporters who scored the round). A peer's reward for the round is the median of every
///   voter's score of it, a voter that did not score it counting NEUTRAL (0); when the voters are
///   even in number one more vote breaks the tie: the peer's own score of itself (NEUTRAL if it
///   gave none). So an exact half of the voters cannot lower a peer below the range the other
///   half and its own score give it, an account nobody honest scored gets NEUTRAL whatever its
///   friends say, and moving a reward any further takes a strict majority;
/// - finalizeRound settles a round in pages (anyone may call it, as often as it takes): the caller
///   submits each page peer's median, which the contract VERIFIES by counting the votes below and
///   equal to it, one pass over the peer's scores, so settling costs the same whatever order the
///   voters' scores came in (a selection over voter-ordered scores cost ~150x in an adversarial
///   order); each page adds its peers' rewards to their totals, and the last gives the round's
///   single win to the highest reward (ties: lowest keccak(round, account), a per-round order no
///   account wins always).
///
/// Gas: a page costs about (peers in the page) x (voters of the round) reads; a report one storage
/// write per score. docs/trust.md has the measured table (benchmarks/bench_chain_gas.py).
contract SwarmCoordinator {
    // ------------------------------------------------------------------ errors
    error NotOwner(address caller);
    error NotStageManager(address caller);
    error NotBootnodeManager(address caller);
    error ZeroAddress();
    error InvalidStageCount();
    error EmptyPeerId();
    error LabelTooLong(uint256 length, uint256 max);
    error AlreadyRegistered(address account);
    error NotRegistered(address account);
    error FutureRound(uint256 round, uint256 currentRound);
    error RoundClosed(uint256 round, uint256 currentRound);
    error AlreadyScored(uint256 round, address account);
    error LengthMismatch(uint256 peers, uint256 scores);
    error DuplicatePeer(address peer);
    error UnsortedPeers(uint256 index);
    error EmptyReport();
    error ScoreOutOfRange(address peer, int256 score);
    error AlreadyFinalized(uint256 round);
    error RoundOpen(uint256 round, uint256 currentRound);
    error RoundSettling(uint256 round);
    error ZeroPageSize();
    error PageStart(uint256 round, uint256 from, uint256 settled);
    error PageTooLong(uint256 round, uint256 end, uint256 scoredPeers);
    error NotMedian(address peer, int256 claimed);

    // ------------------------------------------------------------------ events
    event OwnershipTransferred(address indexed previousOwner, address indexed newOwner);
    event StageManagerChanged(address indexed previousManager, address indexed newManager);
    event BootnodeManagerChanged(address indexed previousManager, address indexed newManager);
    event PeerRegistered(address indexed account, string peerId);
    event StageAdvanced(uint256 indexed round, uint256 stage);
    event RoundAdvanced(uint256 indexed round);
    event ScoresSubmitted(uint256 indexed round, address indexed reporter, address[] peers, int256[] scores);
    event RoundFinalized(uint256 indexed round, address winner, uint256 scoredPeers);
    event RoundPageSettled(uint256 indexed round, uint256 settled, uint256 scoredPeers);
    event BootnodesChanged(uint256 count);

    // ------------------------------------------------------------------ constants
    /// @notice Fixed-point scale of scores and totals (1.0 reward = 1e6).
    int256 public constant REWARD_SCALE = 1e6;
    /// @notice |score| <= MAX_SCORE, i.e. |reward| <= 1e6; fits the int64 scores are stored as.
    int256 public constant MAX_SCORE = 1e6 * REWARD_SCALE;
    uint256 public constant MAX_LABEL = 128;
    /// @notice What a voter that did not score a peer counts as, and the tie-breaking vote of a
    /// peer that did not score itself.
    int256 public constant NEUTRAL = 0;

    // ------------------------------------------------------------------ state
    address public owner;
    address public stageManager;
    address public bootnodeManager;
    uint256 public currentRound;
    uint256 public currentStage;
    uint256 public immutable numStages;

    struct Peer {
        bool registered;
        string label; // the peer id it announced: display only, not unique, never scored
        int256 total; // sum of its finalized round medians
        uint256 wins; // rounds it won
    }

    /// One storage slot per reporter and round: whether it scored another account (a voter on
    /// every peer), and its score of itself (the tie-break of an even vote on it).
    struct Voter {
        bool scoredOthers;
        bool ownGiven;
        int64 own;
    }

    mapping(address => Peer) private _peers;
    address[] private _accounts;
    mapping(uint256 => mapping(address => int64[])) private _scores; // round => peer => scores by others
    mapping(uint256 => address[]) private _scoredPeers; // round => peers with at least one score
    mapping(uint256 => mapping(address => address)) private _lastScored; // round => reporter => last peer it scored
    mapping(uint256 => mapping(address => bool)) private _complete; // round => reporter => its last part landed
    mapping(uint256 => uint256) private _reporterCount; // round => accounts that submitted
    mapping(uint256 => mapping(address => Voter)) private _voter; // round => reporter => how it voted
    mapping(uint256 => uint256) private _scorerCount; // round => reporters that scored another account (voters on all)
    mapping(uint256 => uint256) private _completeCount; // round => accounts whose report is complete
    mapping(uint256 => bool) private _finalized;
    mapping(uint256 => address) private _winner;
    mapping(uint256 => int256) private _best; // round => highest reward settled so far
    mapping(uint256 => uint256) private _settled; // round => scored peers settled so far (the page cursor)
    string[] private _bootnodes;

    modifier onlyOwner() {
        if (msg.sender != owner) revert NotOwner(msg.sender);
        _;
    }

    modifier onlyStageManager() {
        if (msg.sender != stageManager) revert NotStageManager(msg.sender);
        _;
    }

    modifier onlyBootnodeManager() {
        if (msg.sender != bootnodeManager) revert NotBootnodeManager(msg.sender);
        _;
    }

    constructor(uint256 stages) {
        if (stages == 0) revert InvalidStageCount();
        numStages = stages;
        owner = msg.sender;
        stageManager = msg.sender;
        bootnodeManager = msg.sender;
        emit OwnershipTransferred(address(0), msg.sender);
        emit StageManagerChanged(address(0), msg.sender);
        emit BootnodeManagerChanged(address(0), msg.sender);
    }

    // ------------------------------------------------------------------ roles
    function transferOwnership(address newOwner) external onlyOwner {
        if (newOwner == address(0)) revert ZeroAddress();
        emit OwnershipTransferred(owner, newOwner);
        owner = newOwner;
    }

    function setStageManager(address manager) external onlyOwner {
        if (manager == address(0)) revert ZeroAddress();
        emit StageManagerChanged(stageManager, manager);
        stageManager = manager;
    }

    function setBootnodeManager(address manager) external onlyOwner {
        if (manager == address(0)) revert ZeroAddress();
        emit BootnodeManagerChanged(bootnodeManager, manager);
        bootnodeManager = manager;
    }

    // ------------------------------------------------------------------ registry
    /// @notice Registers the calling account, once. ``peerId`` is a display label only: the
    /// binding of swarm peer ids to accounts is signed by the peers themselves off chain.
    function registerPeer(string calldata peerId) external {
        if (_peers[msg.sender].registered) revert AlreadyRegistered(msg.sender);
        if (bytes(peerId).length == 0) revert EmptyPeerId();
        if (bytes(peerId).length > MAX_LABEL) revert LabelTooLong(bytes(peerId).length, MAX_LABEL);
        Peer storage peer = _peers[msg.sender];
        peer.registered = true;
        peer.label = peerId;
        _accounts.push(msg.sender);
        emit PeerRegistered(msg.sender, peerId);
    }

    function isRegistered(address account) external view returns (bool) {
        return _peers[account].registered;
    }

    function registeredAccounts() external view returns (address[] memory) {
        return _accounts;
    }

    // ------------------------------------------------------------------ progression
    /// @notice Next stage; after the last stage the round advances.
    function advanceStage() external onlyStageManager {
        if (currentStage + 1 < numStages) {
            currentStage += 1;
        } else {
            currentStage = 0;
            currentRound += 1;
            emit RoundAdvanced(currentRound);
        }
        emit StageAdvanced(currentRound, currentStage);
    }

    function advanceRound() external onlyStageManager {
        currentStage = 0;
        currentRound += 1;
        emit RoundAdvanced(currentRound);
        emit StageAdvanced(currentRound, 0);
    }

    // ------------------------------------------------------------------ scores
    /// @notice The caller's scores of registered accounts (itself included) for ``round``, once
    /// per round, never empty. ``peers`` strictly ascending (so unique, checked in one pass).
    /// Accepted for the current round and the one before: a peer reports the round it just
    /// finished, and the stage manager may have advanced the round a moment earlier (it reports
    /// and advances as soon as ITS round is done). One round of grace is enough for any peer that
    /// still plays along (it reports round r before it can take part in round r + 1); older rounds
    /// are closed so a settled round never changes, future rounds are not played yet.
    function submitScores(uint256 round, address[] calldata peers, int256[] calldata scores) external {
        _submit(round, peers, scores, true);
    }

    /// @notice One part of the caller's report for ``round``, for reports too big for one block:
    /// parts go in ascending peer order, each starting above the previous part's last peer (a
    /// part sent again is refused as AlreadyScored); ``last`` marks the final one. The caller is a
    /// voter from its first part; the round settles early only once every report is complete.
    function submitScoresPart(uint256 round, address[] calldata peers, int256[] calldata scores, bool last) external {
        _submit(round, peers, scores, last);
    }

    function _submit(uint256 round, address[] calldata peers, int256[] calldata scores, bool last) private {
        if (!_peers[msg.sender].registered) revert NotRegistered(msg.sender);
        if (round > currentRound) revert FutureRound(round, currentRound);
        if (round + 1 < currentRound) revert RoundClosed(round, currentRound);
        if (_finalized[round]) revert AlreadyFinalized(round);
        if (_settled[round] > 0) revert RoundSettling(round);
        if (_complete[round][msg.sender]) revert AlreadyScored(round, msg.sender);
        if (peers.length != scores.length) revert LengthMismatch(peers.length, scores.length);
        if (peers.length == 0) revert EmptyReport();
        Voter storage voter = _voter[round][msg.sender];
        address previous = _lastScored[round][msg.sender];
        if (previous == address(0)) _reporterCount[round] += 1;
        else if (peers[0] <= previous) revert AlreadyScored(round, msg.sender);
        for (uint256 i = 0; i < peers.length; i++) {
            address peer = peers[i];
            int256 score = scores[i];
            if (i > 0 && peer <= peers[i - 1]) {
                if (peer == peers[i - 1]) revert DuplicatePeer(peer);
                revert UnsortedPeers(i);
            }
            if (!_peers[peer].registered) revert NotRegistered(peer);
            if (score > MAX_SCORE || score < -MAX_SCORE) revert ScoreOutOfRange(peer, score);
            int64[] storage list = _scores[round][peer];
            if (list.length == 0) _scoredPeers[round].push(peer);
            list.push(int64(score));
            if (peer == msg.sender) (voter.ownGiven, voter.own) = (true, int64(score));
            else if (!voter.scoredOthers) {
                voter.scoredOthers = true;
                _scorerCount[round] += 1;
            }
        }
        _lastScored[round][msg.sender] = peers[peers.length - 1];
        if (last) {
            _complete[round][msg.sender] = true;
            _completeCount[round] += 1;
        }
        emit ScoresSubmitted(round, msg.sender, peers, scores);
    }

    /// @notice True once no score can change ``round``: it is past, and either every
    /// registered account has completed its report, or its grace round is over, or its settling began.
    function canFinalize(uint256 round) public view returns (bool) {
        if (_finalized[round] || round >= currentRound) return false;
        return round + 1 < currentRound || _completeCount[round] == _accounts.length || _settled[round] > 0;
    }

    /// @notice Settles the next page of ``round``'s scored peers, those at ``from`` (the page
    /// cursor, ``roundPage``) onwards, one per submitted median (anyone may call it, until it
    /// returns true; the client reads ``votes`` and computes them). Each median is verified, not
    /// computed: a value that is not the median of the peer's votes reverts NotMedian. Each peer's
    /// total grows by its reward; the last page gives the round's win to the highest reward. Once
    /// a page is settled the round takes no report.
    function finalizeRound(uint256 round, uint256 from, int256[] calldata medians) external returns (bool done) {
        if (_finalized[round]) revert AlreadyFinalized(round);
        if (!canFinalize(round)) revert RoundOpen(round, currentRound);
        address[] storage scored = _scoredPeers[round];
        if (from != _settled[round]) revert PageStart(round, from, _settled[round]);
        uint256 to = from + medians.length;
        if (to > scored.length) revert PageTooLong(round, to, scored.length);
        if (to == from && to < scored.length) revert ZeroPageSize();
        address winner = _winner[round];
        int256 best = _best[round];
        for (uint256 i = from; i < to; i++) {
            address peer = scored[i];
            int256 reward = medians[i - from];
            if (!_isMedian(round, peer, reward)) revert NotMedian(peer, reward);
            _peers[peer].total += reward;
            if (winner == address(0) || reward > best || (reward == best && _tie(round, peer) < _tie(round, winner))) {
                (winner, best) = (peer, reward);
            }
        }
        (_winner[round], _best[round]) = (winner, best);
        _settled[round] = to;
        emit RoundPageSettled(round, to, scored.length);
        done = to == scored.length;
        if (done) {
            _finalized[round] = true;
            if (winner != address(0)) _peers[winner].wins += 1;
            emit RoundFinalized(round, winner, scored.length);
        }
    }

    function _tie(uint256 round, address peer) private pure returns (uint256) {
        return uint256(keccak256(abi.encode(round, peer)));
    }

    /// @dev The voters on ``peer``: every account that scored another in the round, and the peer
    /// itself when it scored only itself.
    function _voters(uint256 round, address peer) private view returns (uint256) {
        Voter storage voter = _voter[round][peer];
        return _scorerCount[round] + (voter.ownGiven && !voter.scoredOthers ? 1 : 0);
    }

    /// @dev The tie-breaking vote of an even vote on ``peer``: its own score, NEUTRAL if none.
    function _tieBreak(uint256 round, address peer) private view returns (int256) {
        Voter storage voter = _voter[round][peer];
        return voter.ownGiven ? int256(voter.own) : NEUTRAL;
    }

    /// @dev Whether ``median`` is the median of the votes on ``peer``: its scores, a NEUTRAL vote
    /// for every voter that gave none, and the tie-break when the voters are even (an odd count,
    /// so one value). One pass, counting the votes below and equal to ``median``: the same cost
    /// in any order.
    function _isMedian(uint256 round, address peer, int256 median) private view returns (bool) {
        int64[] storage list = _scores[round][peer];
        uint256 m = list.length;
        uint256 voters = _voters(round, peer);
        uint256 below;
        uint256 equal;
        for (uint256 i = 0; i < m; i++) {
            int256 v = list[i];
            if (v < median) below++;
            else if (v == median) equal++;
        }
        uint256 neutrals = voters - m;
        if (NEUTRAL < median) below += neutrals;
        else if (NEUTRAL == median) equal += neutrals;
        uint256 votes = voters;
        if (voters % 2 == 0) {
            votes += 1;
            int256 tie = _tieBreak(round, peer);
            if (tie < median) below++;
            else if (tie == median) equal++;
        }
        uint256 k = (votes - 1) / 2; // the median's index among the votes
        return below <= k && below + equal > k;
    }

    // ------------------------------------------------------------------ batched reads
    function totalRewards(address[] calldata accounts) external view returns (int256[] memory out) {
        out = new int256[](accounts.length);
        for (uint256 i = 0; i < accounts.length; i++) out[i] = _peers[accounts[i]].total;
    }

    function winCounts(address[] calldata accounts) external view returns (uint256[] memory out) {
        out = new uint256[](accounts.length);
        for (uint256 i = 0; i < accounts.length; i++) out[i] = _peers[accounts[i]].wins;
    }

    function labels(address[] calldata accounts) external view returns (string[] memory out) {
        out = new string[](accounts.length);
        for (uint256 i = 0; i < accounts.length; i++) out[i] = _peers[accounts[i]].label;
    }

    function areRegistered(address[] calldata accounts) external view returns (bool[] memory out) {
        out = new bool[](accounts.length);
        for (uint256 i = 0; i < accounts.length; i++) out[i] = _peers[accounts[i]].registered;
    }

    /// @notice The votes on ``account`` in ``round``: the scores it got (its own included), how
    /// many voters there are (each voter without a score is a NEUTRAL vote) and the tie-breaking
    /// vote used when they are even. ``round_reward`` in coord/scores.py is their median.
    function votes(uint256 round, address account) external view returns (int64[] memory scores, uint256 voters, int256 tieBreak) {
        return (_scores[round][account], _voters(round, account), _tieBreak(round, account));
    }

    /// @notice Whether ``median`` is ``account``'s reward for ``round`` (among the voters so far,
    /// final once the round is): the check finalizeRound makes.
    function isMedian(uint256 round, address account, int256 median) external view returns (bool) {
        return _scores[round][account].length > 0 ? _isMedian(round, account, median) : median == NEUTRAL;
    }

    /// @notice How many of ``round``'s scored peers are settled (the next page's ``from``) and how
    /// many there are.
    function roundPage(uint256 round) external view returns (uint256 settled, uint256 scoredPeers) {
        return (_settled[round], _scoredPeers[round].length);
    }

    /// @notice ``round``'s scored peers from index ``from``, at most ``count`` of them, in settling order.
    function scoredPeers(uint256 round, uint256 from, uint256 count) external view returns (address[] memory out) {
        address[] storage scored = _scoredPeers[round];
        uint256 to = from >= scored.length ? from : (scored.length - from > count ? from + count : scored.length);
        out = new address[](to - from);
        for (uint256 i = from; i < to; i++) out[i - from] = scored[i];
    }

    function hasScored(uint256 round, address account) external view returns (bool) {
        return _lastScored[round][account] != address(0);
    }

    /// @notice Whether ``round`` is settled, how many accounts reported it and who won it.
    function roundStatus(uint256 round) external view returns (bool finalized, uint256 reporters, address winner) {
        return (_finalized[round], _reporterCount[round], _winner[round]);
    }

    /// @notice Round, stage and stage count in one call.
    function progress() external view returns (uint256 round, uint256 stage, uint256 stages) {
        return (currentRound, currentStage, numStages);
    }

    // ------------------------------------------------------------------ bootnodes
    function addBootnodes(string[] calldata addrs) external onlyBootnodeManager {
        for (uint256 i = 0; i < addrs.length; i++) _bootnodes.push(addrs[i]);
        emit BootnodesChanged(_bootnodes.length);
    }

    function clearBootnodes() external onlyBootnodeManager {
        delete _bootnodes;
        emit BootnodesChanged(0);
    }

    function bootnodes() external view returns (string[] memory) {
        return _bootnodes;
    }
}
