// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @title SwarmCoordinator: the neutral referee of a permissionless GenRL-Swarm.
/// @notice Who is in (peer registry), which round and stage it is, who earned what
/// (one reward per peer per round and stage, one winner vote per peer per round), and where
/// new peers join (bootnodes). Rewards are fixed-point integers (the client scales floats).
contract SwarmCoordinator {
    // ------------------------------------------------------------------ errors
    error NotOwner(address caller);
    error NotStageManager(address caller);
    error NotBootnodeManager(address caller);
    error ZeroAddress();
    error EmptyPeerId();
    error PeerIdTaken(string peerId, address account);
    error NotPeerAccount(string peerId, address caller);
    error FutureRound(uint256 round, uint256 currentRound);
    error StageOutOfRange(uint256 stage, uint256 numStages);
    error RewardAlreadySubmitted(uint256 round, uint256 stage, string peerId);
    error AlreadyVoted(uint256 round, string peerId);
    error NoWinners();
    error InvalidStageCount();

    // ------------------------------------------------------------------ events
    event OwnershipTransferred(address indexed previousOwner, address indexed newOwner);
    event StageManagerChanged(address indexed previousManager, address indexed newManager);
    event BootnodeManagerChanged(address indexed previousManager, address indexed newManager);
    event PeerRegistered(address indexed account, string peerId);
    event StageAdvanced(uint256 indexed round, uint256 stage);
    event RoundAdvanced(uint256 indexed round);
    event RewardSubmitted(uint256 indexed round, uint256 indexed stage, string peerId, int256 reward);
    event WinnersVoted(uint256 indexed round, string voter, string[] winners);
    event BootnodesChanged(uint256 count);

    // ------------------------------------------------------------------ state
    address public owner;
    address public stageManager;
    address public bootnodeManager;
    uint256 public currentRound;
    uint256 public currentStage;
    uint256 public immutable numStages;

    mapping(bytes32 => address) private _accountOf; // keccak(peerId) => account that registered it
    mapping(address => string[]) private _peerIdsOf;
    mapping(bytes32 => bool) private _rewarded; // keccak(round, stage, peerId)
    mapping(bytes32 => bool) private _voted; // keccak(round, peerId)
    mapping(bytes32 => int256) private _totalReward; // keccak(peerId)
    mapping(bytes32 => uint256) private _wins; // keccak(peerId): winner votes received
    mapping(uint256 => mapping(bytes32 => uint256)) private _roundVotes; // round => keccak(peerId) => votes
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
    /// @notice A peer id belongs to the first account that registers it.
    function registerPeer(string calldata peerId) external {
        if (bytes(peerId).length == 0) revert EmptyPeerId();
        bytes32 key = keccak256(bytes(peerId));
        address holder = _accountOf[key];
        if (holder != address(0)) revert PeerIdTaken(peerId, holder);
        _accountOf[key] = msg.sender;
        _peerIdsOf[msg.sender].push(peerId);
        emit PeerRegistered(msg.sender, peerId);
    }

    function accountOf(string calldata peerId) external view returns (address) {
        return _accountOf[keccak256(bytes(peerId))];
    }

    function peerIdsOf(address account) external view returns (string[] memory) {
        return _peerIdsOf[account];
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

    // ------------------------------------------------------------------ rewards and votes
    function submitReward(uint256 round, uint256 stage, string calldata peerId, int256 reward) external {
        bytes32 peer = _ownPeer(peerId);
        if (round > currentRound) revert FutureRound(round, currentRound);
        if (stage >= numStages) revert StageOutOfRange(stage, numStages);
        bytes32 key = keccak256(abi.encode(round, stage, peer));
        if (_rewarded[key]) revert RewardAlreadySubmitted(round, stage, peerId);
        _rewarded[key] = true;
        _totalReward[peer] += reward;
        emit RewardSubmitted(round, stage, peerId, reward);
    }

    function submitWinners(uint256 round, string calldata voter, string[] calldata winners) external {
        bytes32 peer = _ownPeer(voter);
        if (round > currentRound) revert FutureRound(round, currentRound);
        if (winners.length == 0) revert NoWinners();
        bytes32 key = keccak256(abi.encode(round, peer));
        if (_voted[key]) revert AlreadyVoted(round, voter);
        _voted[key] = true;
        for (uint256 i = 0; i < winners.length; i++) {
            bytes32 w = keccak256(bytes(winners[i]));
            _wins[w] += 1;
            _roundVotes[round][w] += 1;
        }
        emit WinnersVoted(round, voter, winners);
    }

    function _ownPeer(string calldata peerId) private view returns (bytes32 key) {
        key = keccak256(bytes(peerId));
        if (_accountOf[key] != msg.sender) revert NotPeerAccount(peerId, msg.sender);
    }

    // ------------------------------------------------------------------ batched reads
    function totalRewards(string[] calldata peerIds) external view returns (int256[] memory out) {
        out = new int256[](peerIds.length);
        for (uint256 i = 0; i < peerIds.length; i++) out[i] = _totalReward[keccak256(bytes(peerIds[i]))];
    }

    function winCounts(string[] calldata peerIds) external view returns (uint256[] memory out) {
        out = new uint256[](peerIds.length);
        for (uint256 i = 0; i < peerIds.length; i++) out[i] = _wins[keccak256(bytes(peerIds[i]))];
    }

    function roundVotes(uint256 round, string[] calldata peerIds) external view returns (uint256[] memory out) {
        out = new uint256[](peerIds.length);
        for (uint256 i = 0; i < peerIds.length; i++) out[i] = _roundVotes[round][keccak256(bytes(peerIds[i]))];
    }

    function hasSubmittedReward(uint256 round, uint256 stage, string calldata peerId) external view returns (bool) {
        return _rewarded[keccak256(abi.encode(round, stage, keccak256(bytes(peerId))))];
    }

    function hasVoted(uint256 round, string calldata peerId) external view returns (bool) {
        return _voted[keccak256(abi.encode(round, keccak256(bytes(peerId))))];
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
