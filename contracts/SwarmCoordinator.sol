// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @title SwarmCoordinator: the neutral referee of a permissionless GenRL-Swarm.
/// @notice Who is in (one registration per account), which round and stage it is, who earned
/// what, and where new peers join (bootnodes).
///
/// Rewards are honest by construction, not by trust:
/// - the unit is the account (msg.sender): one account = one peer = one voter; the peer id an
///   account registers is only a display label, so nothing can be squatted;
/// - an account scores OTHER accounts only (never itself), once per round, with bounded
///   fixed-point scores (the client scales floats by REWARD_SCALE);
/// - a peer's reward for a round is the lower median of the scores the others gave it, so one
///   outlier (or a minority of colluders) cannot inflate it;
/// - finalizeRound adds each median to the peer's total and gives the round's single win to the
///   highest median (ties: lowest keccak(round, account), a per-round order no account wins always).
///
/// Gas (every peer scoring every other): finalizeRound reads every score of the round (4 per
/// storage slot) and selects each peer's median in memory: 0.5M gas at 10 peers, 5.0M at 50,
/// 16.6M at 100. It grows with peers^2: past ~120 scored peers a round no longer settles within
/// a 30M-gas block. submitScores costs the reporter 0.3M (10 peers) to 2M (100 peers).
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
    error SelfScore(address account);
    error ScoreOutOfRange(address peer, int256 score);
    error AlreadyFinalized(uint256 round);
    error RoundOpen(uint256 round, uint256 currentRound);

    // ------------------------------------------------------------------ events
    event OwnershipTransferred(address indexed previousOwner, address indexed newOwner);
    event StageManagerChanged(address indexed previousManager, address indexed newManager);
    event BootnodeManagerChanged(address indexed previousManager, address indexed newManager);
    event PeerRegistered(address indexed account, string peerId);
    event StageAdvanced(uint256 indexed round, uint256 stage);
    event RoundAdvanced(uint256 indexed round);
    event ScoresSubmitted(uint256 indexed round, address indexed reporter, address[] peers, int256[] scores);
    event RoundFinalized(uint256 indexed round, address winner, uint256 scoredPeers);
    event BootnodesChanged(uint256 count);

    // ------------------------------------------------------------------ constants
    /// @notice Fixed-point scale of scores and totals (1.0 reward = 1e6).
    int256 public constant REWARD_SCALE = 1e6;
    /// @notice |score| <= MAX_SCORE, i.e. |reward| <= 1e6; fits the int64 scores are stored as.
    int256 public constant MAX_SCORE = 1e6 * REWARD_SCALE;
    uint256 public constant MAX_LABEL = 128;

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

    mapping(address => Peer) private _peers;
    address[] private _accounts;
    mapping(uint256 => mapping(address => int64[])) private _scores; // round => peer => scores by others
    mapping(uint256 => address[]) private _scoredPeers; // round => peers with at least one score
    mapping(uint256 => mapping(address => bool)) private _reported; // round => reporter => submitted
    mapping(uint256 => uint256) private _reporterCount; // round => accounts that submitted
    mapping(uint256 => bool) private _finalized;
    mapping(uint256 => address) private _winner;
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
    /// @notice The caller's scores of OTHER registered accounts for ``round``, once per round.
    /// ``peers`` strictly ascending (so unique, checked in one pass), never the caller.
    /// Accepted for the current round and the one before: a peer reports the round it just
    /// finished, and the stage manager may have advanced the round a moment earlier (it reports
    /// and advances as soon as ITS round is done). One round of grace is enough for any peer that
    /// still plays along (it reports round r before it can take part in round r + 1); older rounds
    /// are closed so a settled round never changes, future rounds are not played yet.
    function submitScores(uint256 round, address[] calldata peers, int256[] calldata scores) external {
        if (!_peers[msg.sender].registered) revert NotRegistered(msg.sender);
        if (round > currentRound) revert FutureRound(round, currentRound);
        if (round + 1 < currentRound) revert RoundClosed(round, currentRound);
        if (_finalized[round]) revert AlreadyFinalized(round);
        if (_reported[round][msg.sender]) revert AlreadyScored(round, msg.sender);
        if (peers.length != scores.length) revert LengthMismatch(peers.length, scores.length);
        _reported[round][msg.sender] = true;
        _reporterCount[round] += 1;
        for (uint256 i = 0; i < peers.length; i++) {
            address peer = peers[i];
            int256 score = scores[i];
            if (i > 0 && peer <= peers[i - 1]) {
                if (peer == peers[i - 1]) revert DuplicatePeer(peer);
                revert UnsortedPeers(i);
            }
            if (peer == msg.sender) revert SelfScore(peer);
            if (!_peers[peer].registered) revert NotRegistered(peer);
            if (score > MAX_SCORE || score < -MAX_SCORE) revert ScoreOutOfRange(peer, score);
            int64[] storage list = _scores[round][peer];
            if (list.length == 0) _scoredPeers[round].push(peer);
            list.push(int64(score));
        }
        emit ScoresSubmitted(round, msg.sender, peers, scores);
    }

    /// @notice True once no score can change ``round``: it is past, and either every
    /// registered account has reported it or its grace round is over too.
    function canFinalize(uint256 round) public view returns (bool) {
        if (_finalized[round] || round >= currentRound) return false;
        return round + 1 < currentRound || _reporterCount[round] == _accounts.length;
    }

    /// @notice Settles ``round`` (anyone may call it, once): each scored peer's total grows by
    /// its median, and the peer with the highest median wins the round (one win per round).
    function finalizeRound(uint256 round) external {
        if (_finalized[round]) revert AlreadyFinalized(round);
        if (!canFinalize(round)) revert RoundOpen(round, currentRound);
        _finalized[round] = true;
        address[] storage scored = _scoredPeers[round];
        address winner;
        int256 best;
        uint256 bestTie;
        for (uint256 i = 0; i < scored.length; i++) {
            address peer = scored[i];
            int256 median = _median(_scores[round][peer]);
            _peers[peer].total += median;
            uint256 tie = uint256(keccak256(abi.encode(round, peer)));
            if (winner == address(0) || median > best || (median == best && tie < bestTie)) {
                (winner, best, bestTie) = (peer, median, tie);
            }
        }
        if (winner != address(0)) {
            _peers[winner].wins += 1;
            _winner[round] = winner;
        }
        emit RoundFinalized(round, winner, scored.length);
    }

    /// @dev Lower median (element (n - 1) / 2 of the sorted scores): inflating a peer takes a
    /// strict majority of its scorers, so a lone friend of a 3-peer swarm cannot. Quickselect
    /// (Hoare partition, middle pivot): linear on average, quadratic at worst like a sort.
    function _median(int64[] storage list) private view returns (int256) {
        int64[] memory v = list;
        uint256 k = (v.length - 1) / 2;
        uint256 lo = 0;
        uint256 hi = v.length - 1;
        unchecked {
            while (lo < hi) {
                int64 pivot = v[(lo + hi) / 2];
                uint256 i = lo;
                uint256 j = hi;
                while (i <= j) {
                    while (v[i] < pivot) i++;
                    while (v[j] > pivot) j--;
                    if (i <= j) {
                        (v[i], v[j]) = (v[j], v[i]);
                        i++;
                        if (j == 0) break;
                        j--;
                    }
                }
                if (k <= j) hi = j;
                else if (k >= i) lo = i;
                else break;
            }
        }
        return v[k];
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

    /// @notice ``account``'s reward for ``round`` (the median so far, final once the round is)
    /// and how many accounts scored it.
    function roundReward(uint256 round, address account) external view returns (int256 median, uint256 scorers) {
        int64[] storage list = _scores[round][account];
        scorers = list.length;
        median = scorers == 0 ? int256(0) : _median(list);
    }

    function hasScored(uint256 round, address account) external view returns (bool) {
        return _reported[round][account];
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
